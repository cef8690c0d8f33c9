// Command mutate checks that pmem's crash harness catches every missing
// flush and fence: it removes each flush, fence and persist call on the
// production paths of package pmem in turn (found by parsing the package,
// so a new call site is covered without anyone listing it), plus a few
// hand-written reorderings, builds the package's tests with the mutation
// through `go test -overlay` (the source tree is never modified), runs the
// crash tests, and requires every run to fail. It prints a table of the
// mutations and the crash state that caught each, and exits non-zero if
// any mutation survived or did not build.
//
//	go run ./pmem/internal/mutate [-states N] [-seed S] [-only SUBSTR] [-list]
//
// Run it from the module root (make mutate does).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// flushCalls are the names of the calls that flush or fence, at every
// level of the production path: the region's helpers, the medium's
// methods, and the hardware interface under them.
var flushCalls = map[string]bool{
	"flush": true, "fence": true, "persist": true, "persistSpans": true,
	"Flush": true, "Fence": true,
	"flushRange": true, "flushLines": true, "sfence": true, "msync": true,
}

// skipFuncs hold calls that are not on a region's path: the real
// machine's instructions (under the simulator, so no software test can
// see them) and the benchmark helper.
var skipFuncs = map[string]bool{
	"cpuHardware.flushLines": true, "cpuHardware.sfence": true, "cpuHardware.msync": true,
	"FlushLines": true, "sfenceAsm": true,
}

// skipFiles are not production paths on linux/amd64, or are the
// simulator itself.
var skipFiles = map[string]bool{"tracker.go": true, "medium_other.go": true, "persist_other.go": true}

// mutation is one change to one file.
type mutation struct {
	file, site, what string
	apply            func(src []byte) ([]byte, error)
}

// orderings are hand-written mutations that keep every flush but break
// the order the protocol depends on. Each names text that must exist in
// the source; if it does not, the tool says so (update it with the code).
var orderings = []struct {
	file, site, what string
	edits            [][2]string // each old text, which must occur once, and its replacement
}{
	{
		file: "region.go", site: "Format", what: "write the new superblocks before clearing the old area",
		edits: [][2]string{
			{"\tr.zero(rootsOff, g.recordsEnd()-rootsOff)\n\tif err := r.persist(rootsOff, g.recordsEnd()-rootsOff); err != nil {\n\t\treturn nil, err\n\t}\n", ""},
			{"\treturn Attach(m, o)\n}\n\n// formatGeometry", "\tr.zero(rootsOff, g.recordsEnd()-rootsOff)\n\tif err := r.persist(rootsOff, g.recordsEnd()-rootsOff); err != nil {\n\t\treturn nil, err\n\t}\n\treturn Attach(m, o)\n}\n\n// formatGeometry"},
		},
	},
	{
		file: "region.go", site: "Format", what: "leave the old superblocks valid while clearing the old area",
		edits: [][2]string{{"\tfor _, off := range []uint64{0, superblockSlot} {\n\t\tr.store8(off, 0)\n", "\tfor _, off := range []uint64{} {\n\t\tr.store8(off, 0)\n"}},
	},
	{
		file: "tx.go", site: "Tx.commit", what: "flush WriteFresh data after the commit point, not before the log",
		edits: [][2]string{
			{"\tfor _, s := range tx.dirty {\n\t\terrs.add(r.flush(s.off, s.n))\n\t}\n\tg := r.geo\n", "\tg := r.geo\n"},
			{"\tif errs.add(r.persist(slotOff, 8)) != nil { // F2: committed\n\t\treturn errs.err\n\t}\n", "\tif errs.add(r.persist(slotOff, 8)) != nil { // F2: committed\n\t\treturn errs.err\n\t}\n\tfor _, s := range tx.dirty {\n\t\terrs.add(r.flush(s.off, s.n))\n\t}\n"},
		},
	},
	{
		file: "region.go", site: "recoverLog", what: "clear the replayed slots before the replayed words are durable",
		edits: [][2]string{{"\tif err := r.persistSpans(touched); err != nil {\n\t\treturn err\n\t}\n\tvar errs flushErrs\n\tfor _, i := range clearSlots {\n\t\tr.store8(g.slotOff(i), 0)\n\t\terrs.add(r.flush(g.slotOff(i), 8))\n\t}\n\tif errs.add(r.fence()) != nil {\n\t\treturn errs.err\n\t}\n",
			"\tvar errs flushErrs\n\tfor _, i := range clearSlots {\n\t\tr.store8(g.slotOff(i), 0)\n\t\terrs.add(r.flush(g.slotOff(i), 8))\n\t}\n\tif errs.add(r.fence()) != nil {\n\t\treturn errs.err\n\t}\n\tif err := r.persistSpans(touched); err != nil {\n\t\treturn err\n\t}\n"}},
	},
	{
		file: "tx.go", site: "Tx.commit", what: "store the commit word before the entries are durable",
		edits: [][2]string{{"\terrs.add(r.flush(slotOff, 8+uint64(len(enc))))\n\tif errs.add(r.fence()) != nil { // F1: entries durable\n\t\treturn errs.err\n\t}\n\tr.store8(slotOff, seq)\n",
			"\tr.store8(slotOff, seq)\n\terrs.add(r.flush(slotOff, 8+uint64(len(enc))))\n\tif errs.add(r.fence()) != nil { // F1: entries durable\n\t\treturn errs.err\n\t}\n"}},
	},
	{
		file: "tx.go", site: "Tx.freeBlocks", what: "return freed blocks to the allocator before the free is durable",
		edits: [][2]string{{"\ttx.onApplied = append(tx.onApplied, func() { r.releaseBlocks(e) })\n", "\tr.releaseBlocks(e)\n"}},
	},
	{
		file: "tx.go", site: "Tx.Commit", what: "return a commit as durable although the region failed meanwhile",
		edits: [][2]string{{"\tif err := r.failure(); err != nil {\n\t\treturn err\n\t}\n\tfor _, f := range tx.onApplied {", "\tfor _, f := range tx.onApplied {"}},
	},
}

type result struct {
	m       mutation
	caught  string
	elapsed time.Duration
	ok      bool
}

func main() {
	dir := flag.String("dir", "pmem", "package directory to mutate")
	run := flag.String("run", "^(TestCrashRecovery|TestFormatCrash)$,^TestCommitErrorsReachEveryCommit$", "comma-separated test patterns, run in turn until one catches the mutation: the crash harness first")
	states := flag.Int("states", 6000, "crash states per run of TestCrashRecovery")
	seed := flag.Uint64("seed", 20261130, "seed of every run (fixed, so the table is reproducible)")
	only := flag.String("only", "", "run only mutations whose description contains this")
	list := flag.Bool("list", false, "list the mutations and exit")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on each run")
	flag.Parse()

	muts, err := discover(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	if *only != "" {
		muts = slices.DeleteFunc(muts, func(m mutation) bool {
			return !strings.Contains(m.file+" "+m.site+" "+m.what, *only)
		})
	}
	if *list {
		for i, m := range muts {
			fmt.Printf("%2d  %-28s %-24s %s\n", i+1, m.file, m.site, m.what)
		}
		return
	}
	tmp, err := os.MkdirTemp("", "pmem-mutate")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	fmt.Printf("pmem mutation test: %d mutations; each: go test -run P ./%s -pmem.crashstates=%d -pmem.seed=%d for P in %s until one fails\n\n", len(muts), *dir, *states, *seed, *run)
	var results []result
	for i, m := range muts {
		res := runOne(tmp, *dir, m, *run, *states, *seed, *timeout)
		results = append(results, res)
		status := "caught"
		if !res.ok {
			status = "NOT CAUGHT"
		}
		fmt.Printf("[%d/%d] %s: %s %s — %s (%s)\n", i+1, len(muts), status, m.site, m.what, res.caught, res.elapsed.Round(time.Second))
	}
	survived := 0
	fmt.Printf("\n| # | where | mutation | caught by |\n|---|---|---|---|\n")
	for i, r := range results {
		if !r.ok {
			survived++
		}
		fmt.Printf("| %d | %s %s | %s | %s |\n", i+1, r.m.file, r.m.site, r.m.what, r.caught)
	}
	fmt.Printf("\n%d mutations, %d caught, %d not caught, in %v\n", len(results), len(results)-survived, survived, time.Since(start).Round(time.Second))
	if survived > 0 {
		os.Exit(1)
	}
}

// discover parses the production files of dir and lists a removal
// mutation for every flush or fence call, then the orderings.
func discover(dir string) ([]mutation, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var muts []mutation
	for _, path := range files {
		base := filepath.Base(path)
		if strings.HasSuffix(base, "_test.go") || skipFiles[base] {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fname := funcName(fd)
			if skipFuncs[fname] {
				continue
			}
			var stack []ast.Node
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if n == nil {
					stack = stack[:len(stack)-1]
					return true
				}
				defer func() { stack = append(stack, n) }()
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				name := calleeName(call)
				if !flushCalls[name] {
					return true
				}
				stmt := false
				if len(stack) > 0 {
					_, stmt = stack[len(stack)-1].(*ast.ExprStmt)
				}
				start, end := fset.Position(call.Pos()).Offset, fset.Position(call.End()).Offset
				args := string(src[fset.Position(call.Lparen).Offset+1 : fset.Position(call.Rparen).Offset])
				// The arguments are still evaluated and used, so the
				// mutant compiles; the call does nothing.
				repl := "func(...any) error { return nil }(" + args + ")"
				if stmt {
					repl = "func(...any) {}(" + args + ")"
				}
				line := fset.Position(call.Pos()).Line
				muts = append(muts, mutation{
					file: fmt.Sprintf("%s:%d", base, line), site: fname,
					what: "remove " + string(src[start:fset.Position(call.Lparen).Offset]) + "()",
					apply: func(src []byte) ([]byte, error) {
						out := slices.Clone(src[:start])
						out = append(out, repl...)
						return append(out, src[end:]...), nil
					},
				})
				return true
			})
		}
	}
	for _, o := range orderings {
		muts = append(muts, mutation{
			file: o.file, site: o.site, what: o.what,
			apply: func(src []byte) ([]byte, error) {
				for _, e := range o.edits {
					if bytes.Count(src, []byte(e[0])) != 1 {
						return nil, fmt.Errorf("the text this mutation changes is no longer in %s exactly once: update pmem/internal/mutate", o.file)
					}
					src = bytes.Replace(src, []byte(e[0]), []byte(e[1]), 1)
				}
				return src, nil
			},
		})
	}
	return muts, nil
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

func calleeName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

var (
	stateRE = regexp.MustCompile(`crash state \d+ \((?:store|flush|fence|msync) \d+, seed 0x[0-9a-f]+\)|crash (?:during recovery at its \w+ \d+|right after recovery) \(seed 0x[0-9a-f]+\)`)
	failRE  = regexp.MustCompile(`--- FAIL: (\S+)`)
	errRE   = regexp.MustCompile(`(?m)^\s+Error:\s+(.*)\n(.*)$`)
)

// runOne applies m through an overlay and runs the tests.
func runOne(tmp, dir string, m mutation, run string, states int, seed uint64, timeout time.Duration) result {
	res := result{m: m}
	file := strings.SplitN(m.file, ":", 2)[0]
	path, _ := filepath.Abs(filepath.Join(dir, file))
	src, err := os.ReadFile(path)
	if err == nil {
		src, err = m.apply(src)
	}
	if err != nil {
		res.caught = "mutation not applied: " + err.Error()
		return res
	}
	mutant := filepath.Join(tmp, "mutant.go")
	overlay := filepath.Join(tmp, "overlay.json")
	js, _ := json.Marshal(map[string]map[string]string{"Replace": {path: mutant}})
	if err := os.WriteFile(mutant, src, 0o644); err != nil {
		res.caught = err.Error()
		return res
	}
	if err := os.WriteFile(overlay, js, 0o644); err != nil {
		res.caught = err.Error()
		return res
	}
	start := time.Now()
	var out []byte
	var ctxErr error
	for _, pattern := range strings.Split(run, ",") {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, "go", "test", "-overlay", overlay, "-count=1", "-failfast", "-run", pattern, "./"+dir,
			"-args", fmt.Sprintf("-pmem.crashstates=%d", states), fmt.Sprintf("-pmem.seed=%d", seed))
		out, err = cmd.CombinedOutput()
		ctxErr = ctx.Err()
		cancel()
		if err != nil {
			break
		}
	}
	res.elapsed = time.Since(start)
	switch {
	case err == nil:
		res.caught = "NOT CAUGHT: every test passed"
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		res.caught = "DOES NOT BUILD: " + firstLine(out)
	case ctxErr != nil:
		res.caught = "NOT CAUGHT: timed out"
	default:
		res.ok = true
		test := "?"
		if f := failRE.FindAllSubmatch(out, -1); len(f) > 0 {
			test = string(f[len(f)-1][1])
			for _, x := range f { // the innermost failing subtest
				if len(x[1]) > len(test) {
					test = string(x[1])
				}
			}
		}
		switch {
		case stateRE.Find(out) != nil:
			res.caught = test + ": " + string(stateRE.Find(out))
		case errRE.Find(out) != nil:
			m := errRE.FindSubmatch(out)
			msg := strings.TrimSpace(string(m[1]))
			if strings.HasSuffix(msg, ":") { // the message is on the next line
				msg += " " + strings.TrimSpace(string(m[2]))
			}
			res.caught = test + ": " + truncate(msg, 110)
		default:
			res.caught = test + ": " + truncate(firstLine(out), 90)
		}
	}
	return res
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
