package fuse

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Real programs in a mount: tar, cp -a, diff -r, git, sqlite3 and rsync
// on a copy of this repository's source. Each skips when its program is
// missing (.ci/run installs them).
//
// No exec.Cmd here sets Dir inside the mount: see as() for the deadlock.

// need skips t unless the programs are installed.
func need(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (apt-get install %s)", p, p)
		}
	}
}

// run runs a program (bounded by two minutes) and returns its output; a
// failure fails the test with the output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC", "HOME="+t.TempDir(),
		"GIT_AUTHOR_NAME=octofs", "GIT_AUTHOR_EMAIL=octofs@example.invalid",
		"GIT_COMMITTER_NAME=octofs", "GIT_COMMITTER_EMAIL=octofs@example.invalid", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

var (
	sourceOnce sync.Once
	sourceDir  string
	sourceErr  error
)

// sourceTree returns a directory (outside any mount) holding this
// repository's tracked files: a real tree of a few hundred files.
func sourceTree(t *testing.T) string {
	t.Helper()
	need(t, "git", "tar")
	sourceOnce.Do(func() {
		root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			sourceErr = fmt.Errorf("not in a git checkout: %v", err)
			return
		}
		top := strings.TrimSpace(string(root))
		dir, err := os.MkdirTemp("", "octofs-src-")
		if err != nil {
			sourceErr = err
			return
		}
		// TestMain removes it. The archive of HEAD is what a clone holds.
		cmd := exec.Command("sh", "-c", "git -C \"$1\" archive HEAD | tar -x -C \"$2\"", "sh", top, dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			sourceErr = fmt.Errorf("git archive: %v: %s", err, out)
			return
		}
		sourceDir = dir
	})
	if sourceErr != nil {
		t.Skipf("no source tree to copy: %v", sourceErr)
	}
	return sourceDir
}

func TestPrograms(t *testing.T) {
	forEachFixture(t, func(t *testing.T, f *fixture) {
		mnt, _ := f.mount(t, Options{})
		t.Run("tar", func(t *testing.T) {
			src := sourceTree(t)
			need(t, "diff")
			dst := subdir(t, mnt, "tar")
			archive := filepath.Join(t.TempDir(), "src.tar")
			run(t, "tar", "-cf", archive, "-C", src, ".")
			run(t, "tar", "-xf", archive, "-C", dst)
			run(t, "diff", "-r", "--no-dereference", src, dst)
			// tar's own comparison: contents, modes, times, links.
			run(t, "tar", "--compare", "-f", archive, "-C", dst)
			// And out again: the archive of the mount lists the same.
			back := filepath.Join(t.TempDir(), "back.tar")
			run(t, "tar", "-cf", back, "-C", dst, ".")
			if a, b := run(t, "tar", "-tf", archive), run(t, "tar", "-tf", back); a != b {
				t.Errorf("archives list different files:\n%s\n---\n%s", a, b)
			}
		})
		t.Run("cp -a", func(t *testing.T) {
			src := sourceTree(t)
			need(t, "cp", "diff", "stat")
			dst := filepath.Join(subdir(t, mnt, "cp"), "tree")
			run(t, "cp", "-a", src, dst)
			run(t, "diff", "-r", "--no-dereference", src, dst)
			// cp -a keeps modes and modification times.
			for _, rel := range []string{"go.mod", "fuse/doc.go", "scripts/demo.sh"} {
				a := run(t, "stat", "-c", "%a %Y %s", filepath.Join(src, rel))
				b := run(t, "stat", "-c", "%a %Y %s", filepath.Join(dst, rel))
				if a != b {
					t.Errorf("%s: mode, mtime, size %q in the source, %q in the mount", rel, a, b)
				}
			}
			// A copy within the mount, and back out.
			run(t, "cp", "-a", dst, dst+"2")
			out := filepath.Join(t.TempDir(), "out")
			run(t, "cp", "-a", dst+"2", out)
			run(t, "diff", "-r", "--no-dereference", src, out)
		})
		t.Run("git", func(t *testing.T) {
			src := sourceTree(t)
			need(t, "git")
			repo := filepath.Join(subdir(t, mnt, "git"), "repo")
			run(t, "cp", "-a", src, repo)
			run(t, "git", "-C", repo, "init", "-q", "-b", "main")
			run(t, "git", "-C", repo, "add", "-A")
			run(t, "git", "-C", repo, "commit", "-q", "-m", "first")
			if err := os.WriteFile(filepath.Join(repo, "NEW"), []byte("new file\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, "git", "-C", repo, "add", "NEW")
			run(t, "git", "-C", repo, "commit", "-q", "-m", "second")
			log := run(t, "git", "-C", repo, "log", "--format=%s")
			if log != "second\nfirst\n" {
				t.Errorf("git log: %q", log)
			}
			if st := run(t, "git", "-C", repo, "status", "--porcelain"); st != "" {
				t.Errorf("git status after commit is not clean:\n%s", st)
			}
			run(t, "git", "-C", repo, "fsck", "--strict", "--no-progress")
			// A clone out of the mount has the same files.
			clone := filepath.Join(t.TempDir(), "clone")
			run(t, "git", "clone", "-q", repo, clone)
			run(t, "diff", "-r", "--exclude=.git", repo, clone)
		})
		t.Run("sqlite3", func(t *testing.T) {
			need(t, "sqlite3")
			db := filepath.Join(subdir(t, mnt, "sqlite"), "test.db")
			run(t, "sqlite3", db, "CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT, n INTEGER);")
			// Writers in parallel, each in its own process, serialised by
			// sqlite's fcntl locks on the mount (busy_timeout waits).
			const writers, rows = 4, 25
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Go(func() {
					var sql strings.Builder
					sql.WriteString(".timeout 60000\n")
					for i := range rows {
						fmt.Fprintf(&sql, "INSERT INTO t (who, n) VALUES ('w%d', %d);\n", w, i)
					}
					cmd := exec.Command("sqlite3", db)
					cmd.Stdin = strings.NewReader(sql.String())
					if out, err := cmd.CombinedOutput(); err != nil {
						errs <- fmt.Errorf("writer %d: %v: %s", w, err, out)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			got := strings.TrimSpace(run(t, "sqlite3", db, "SELECT count(*), count(DISTINCT who), sum(n) FROM t;"))
			want := fmt.Sprintf("%d|%d|%d", writers*rows, writers, writers*rows*(rows-1)/2)
			if got != want {
				t.Errorf("select: %s, want %s", got, want)
			}
			if ok := strings.TrimSpace(run(t, "sqlite3", db, "PRAGMA integrity_check;")); ok != "ok" {
				t.Errorf("integrity_check: %s", ok)
			}
			// A write transaction holds the database's lock: another
			// process cannot write until it ends.
			busy := exec.Command("sqlite3", db, "INSERT INTO t (who, n) VALUES ('late', 0);")
			holder := exec.Command("sqlite3", db)
			stdin, err := holder.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer holder.Process.Kill()
			fmt.Fprintln(stdin, "BEGIN EXCLUSIVE; SELECT 'locked';")
			buf := make([]byte, 7)
			if _, err := stdout.Read(buf); err != nil || string(buf[:6]) != "locked" {
				t.Fatalf("holder did not take the lock: %q %v", buf, err)
			}
			if out, err := busy.CombinedOutput(); err == nil || !strings.Contains(string(out), "locked") {
				t.Errorf("a write while another process holds an exclusive transaction: %v: %s", err, out)
			}
			fmt.Fprintln(stdin, "COMMIT;")
			stdin.Close()
			if err := holder.Wait(); err != nil {
				t.Errorf("holder: %v", err)
			}
			run(t, "sqlite3", db, "INSERT INTO t (who, n) VALUES ('late', 0);")
			if n := strings.TrimSpace(run(t, "sqlite3", db, "SELECT count(*) FROM t;")); n != strconv.Itoa(writers*rows+1) {
				t.Errorf("rows after the lock: %s", n)
			}
		})
		t.Run("rsync", func(t *testing.T) {
			src := sourceTree(t)
			need(t, "rsync", "diff")
			dst := subdir(t, mnt, "rsync")
			run(t, "rsync", "-a", src+"/", dst+"/")
			run(t, "diff", "-r", "--no-dereference", src, dst)
			// A second run finds nothing to do: sizes and times match.
			if out := run(t, "rsync", "-a", "--itemize-changes", src+"/", dst+"/"); out != "" {
				t.Errorf("second rsync transferred:\n%s", out)
			}
			// Checksums agree too.
			if out := run(t, "rsync", "-a", "--checksum", "--itemize-changes", src+"/", dst+"/"); out != "" {
				t.Errorf("rsync --checksum found differences:\n%s", out)
			}
		})
	})
}
