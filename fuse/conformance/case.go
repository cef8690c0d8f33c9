package conformance

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Case is one conformance case: a script of system calls run in a fresh
// directory, each step as one user. Its name is "area/what it checks"; the
// area is the system call or topic (chmod, rename, xattr, ...).
type Case struct {
	Name  string
	Steps []string
}

// Area is the part of the name before the first '/'.
func (c Case) Area() string {
	area, _, _ := strings.Cut(c.Name, "/")
	return area
}

// Step is a parsed script line: "USER OP ARGS... [=> WANT]".
type Step struct {
	User string
	Op   string
	Args []string
	// Want is what the reference must answer, if the case says (the
	// output of a query, an errno name, or "0" for success). It checks the
	// case itself; octofs is compared with the reference's answer.
	Want    string
	HasWant bool
}

// ParseStep parses one script line.
func ParseStep(line string) (Step, error) {
	var s Step
	body := line
	if i := strings.Index(line, " => "); i >= 0 {
		body, s.Want, s.HasWant = line[:i], line[i+4:], true
	}
	f := strings.Fields(body)
	if len(f) < 2 {
		return s, fmt.Errorf("%w: %q: want USER OP ARGS", ErrScript, line)
	}
	s.User, s.Op, s.Args = f[0], f[1], f[2:]
	if _, ok := Users[s.User]; !ok {
		return s, fmt.Errorf("%w: %q: unknown user %q", ErrScript, line, s.User)
	}
	for i, a := range s.Args {
		if a == "''" {
			s.Args[i] = ""
		}
	}
	return s, nil
}

// User is who runs a step: uid, gid and supplementary groups, as set on
// the thread that makes the call.
type User struct {
	UID, GID uint32
	Groups   []uint32
}

// Users are the identities scripts name. Each has its own (uid, gid) pair:
// the FUSE adapter caches a caller's supplementary groups by (pid, uid,
// gid), so two users sharing a pair on one thread would see each other's
// groups for a second.
var Users = map[string]User{
	"root":   {0, 0, nil},
	"nobody": {65534, 65534, nil},
	"other":  {65533, 65533, nil},
	// member has nobody's group as a supplementary group.
	"member": {65532, 65532, []uint32{65534}},
	// primary has nobody's group as its primary group.
	"primary": {65531, 65534, nil},
	// multi is in both other's and nobody's groups.
	"multi": {65530, 65530, []uint32{65530, 65533, 65534}},
}

// Result is what one run of a case produced: one line per step (the
// errno name, "0", or the query's output), then the final tree.
type Result struct {
	Steps []string
	// Tree is the case directory afterwards, one line per entry (see
	// walkTree), sorted by path.
	Tree []string
	// Err is a malformed script or an executor failure (not a file system
	// answer): the case is broken, not the file system.
	Err string
	// Elapsed is how long the case took.
	Elapsed time.Duration
}

// Diff compares got with want (the reference) and describes every
// difference, one per line, naming the step by its script line.
func Diff(c Case, want, got Result) []string {
	var out []string
	if want.Err != "" || got.Err != "" {
		if want.Err != got.Err {
			out = append(out, fmt.Sprintf("executor: reference %q, octofs %q", want.Err, got.Err))
		}
		return out
	}
	for i, line := range c.Steps {
		var w, g string
		if i < len(want.Steps) {
			w = want.Steps[i]
		}
		if i < len(got.Steps) {
			g = got.Steps[i]
		}
		if w != g {
			out = append(out, fmt.Sprintf("step %d %q: reference %s, octofs %s", i+1, line, short(w), short(g)))
		}
	}
	wt := map[string]string{}
	for _, l := range want.Tree {
		p, rest, _ := strings.Cut(l, " ")
		wt[p] = rest
	}
	gt := map[string]string{}
	for _, l := range got.Tree {
		p, rest, _ := strings.Cut(l, " ")
		gt[p] = rest
	}
	var paths []string
	for p := range wt {
		paths = append(paths, p)
	}
	for p := range gt {
		if _, ok := wt[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		w, wok := wt[p]
		g, gok := gt[p]
		switch {
		case !wok:
			out = append(out, fmt.Sprintf("afterwards %s: reference has no such entry, octofs %s", short(p), g))
		case !gok:
			out = append(out, fmt.Sprintf("afterwards %s: reference %s, octofs has no such entry", short(p), w))
		case w != g:
			out = append(out, fmt.Sprintf("afterwards %s: reference %s, octofs %s", short(p), w, g))
		}
	}
	return out
}

// CheckWants reports the steps whose reference answer is not what the
// case says it should be: the case (or the reference) is wrong.
func CheckWants(c Case, ref Result) []string {
	var out []string
	if ref.Err != "" {
		return []string{"executor: " + ref.Err}
	}
	for i, line := range c.Steps {
		s, err := ParseStep(line)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if !s.HasWant {
			continue
		}
		got := ""
		if i < len(ref.Steps) {
			got = ref.Steps[i]
		}
		if got != s.Want {
			out = append(out, fmt.Sprintf("step %d %q: the reference answers %s", i+1, line, got))
		}
	}
	return out
}

// short abbreviates what is too long to read in a report (the paths of
// the PATH_MAX cases, long values).
func short(s string) string {
	if len(s) <= 160 {
		return s
	}
	return fmt.Sprintf("%s...(%d bytes)...%s", s[:60], len(s), s[len(s)-60:])
}
