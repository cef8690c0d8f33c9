// Package sat is saturating uint64 arithmetic for figures summed from
// what other nodes report (capacities, counts): a node that claims near
// 2^64 must make a sum read "as large as it gets", not wrap it to a
// plausible small figure.
package sat
