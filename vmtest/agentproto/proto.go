// Package agentproto is the wire format between the vmtest harness on the
// host and the agent in each guest: JSON objects, one per line, over a
// virtio-serial port named PortName.
package agentproto

// PortName is the virtio-serial port the agent talks on.
const PortName = "org.octofs.agent"

// Request is what the host asks of a guest.
type Request struct {
	// ID names the job; replies carry it.
	ID uint64 `json:"id"`
	// Op is "run" (start Argv; output and exit follow as Replies), "kill"
	// (signal job Target's process group) or "poweroff".
	Op     string   `json:"op"`
	Argv   []string `json:"argv,omitempty"`
	Env    []string `json:"env,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	Target uint64   `json:"target,omitempty"`
}

// Reply is what a guest reports: its hello (ID 0), output of a job, or a
// job's end.
type Reply struct {
	ID uint64 `json:"id"`
	// Hello is the guest's name, sent once when the agent starts.
	Hello  string `json:"hello,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	// Out is a chunk of the job's combined stdout and stderr.
	Out string `json:"out,omitempty"`
	// Done marks the job's end with its exit code (-1: it could not
	// start or was killed by a signal; Err says why).
	Done bool   `json:"done,omitempty"`
	Code int    `json:"code"`
	Err  string `json:"err,omitempty"`
}
