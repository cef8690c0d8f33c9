package conformance

// Known failures: cases on which a back end differs from the reference for
// a reason recorded elsewhere. Each names its finding (CF-n, in the
// findings list the lead keeps) or, for client.Memory, the part of the
// namespace service the in-memory cluster does not model. A listed case
// that passes fails the test, so the lists shrink as fixes land.

// memoryKnown are client.Memory's gaps (its doc lists them).
var memoryKnown = map[string]string{}

// clusterKnown are the real cluster's, through a default mount.
var clusterKnown = map[string]string{}

// serverKnown are the real cluster's with ServerPermissions (no
// default_permissions: every check is the cluster's).
var serverKnown = map[string]string{}
