package gitfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusRandomHardMatchesGit is TestStatusRandomMatchesGit with the
// operations real checkouts see beyond edits: intent-to-add entries,
// assume-unchanged and skip-worktree bits, CRLF content under
// .gitattributes and core.autocrlf, exec bits, copies detection, nested
// ignore files with negations and timestamps set back in time, compared
// with git status at the root and in every folder after each round.
func TestStatusRandomHardMatchesGit(t *testing.T) {
	for _, seed := range randomSeeds([]uint64{11, 12, 13}, 1, 5000) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			gitEnv(t)
			rng := rand.New(rand.NewPCG(seed, 17))
			wt := newRepo(t)
			names := []string{"a.txt", "b.c", "c.log", "d e", "é.txt", "x.bat", "y.auto"}
			dirs := []string{"", "p", "p/q", "r", "ign", "r/s"}
			write(t, wt, ".gitignore", "*.log\nign/\n!keep.log\n")
			write(t, wt, "p/.gitignore", "!*.log\n*.c\n")
			write(t, wt, ".gitattributes", "*.bat text eol=crlf\n*.auto text=auto\n")
			switch seed % 3 {
			case 0:
				git(t, wt, "config", "core.autocrlf", "true")
			case 1:
				git(t, wt, "config", "status.renames", "copies")
			}
			randPath := func() string { return randomPath(rng, dirs, names) }
			content := func() string {
				var b strings.Builder
				eol := []string{"\n", "\r\n"}[rng.IntN(2)]
				for range rng.IntN(40) {
					fmt.Fprintf(&b, "line %d%s", rng.IntN(10), eol)
				}
				return b.String()
			}
			for round := range 5 {
				for range 14 {
					p := randPath()
					abs := filepath.Join(wt, filepath.FromSlash(p))
					switch rng.IntN(14) {
					case 0, 1, 2:
						os.RemoveAll(abs)
						write(t, wt, p, content())
					case 3:
						os.Remove(abs)
					case 4:
						os.Chmod(abs, os.FileMode(0o644|rng.IntN(2)*0o111))
					case 5:
						cmdMayFail(t, wt, "add", "-A", "--", filepath.Dir(p))
					case 6:
						q := randPath()
						os.MkdirAll(filepath.Join(wt, filepath.Dir(filepath.FromSlash(q))), 0o755)
						cmdMayFail(t, wt, "mv", "-k", p, q)
					case 7:
						q := randPath()
						os.MkdirAll(filepath.Join(wt, filepath.Dir(filepath.FromSlash(q))), 0o755)
						if os.Rename(abs, filepath.Join(wt, filepath.FromSlash(q))) == nil {
							cmdMayFail(t, wt, "add", "-N", "--", q)
						}
					case 8:
						cmdMayFail(t, wt, "rm", "-q", "--cached", "--ignore-unmatch", p)
					case 9:
						cmdMayFail(t, wt, "update-index", "--"+[]string{"assume-unchanged", "no-assume-unchanged", "skip-worktree", "no-skip-worktree"}[rng.IntN(4)], p)
					case 10:
						// Same size, whole-second mtime kept: only racy
						// checks or ctime can see it.
						if fi, err := os.Stat(abs); err == nil && fi.Mode().IsRegular() {
							b, _ := os.ReadFile(abs)
							for i := range b {
								if b[i] >= '0' && b[i] <= '9' {
									b[i] = '0' + byte(rng.IntN(10))
								}
							}
							os.WriteFile(abs, b, fi.Mode())
						}
					case 11:
						if fi, err := os.Stat(abs); err == nil {
							tm := fi.ModTime().Add(-3 * 3600 * 1e9)
							os.Chtimes(abs, tm, tm)
						}
					case 12:
						cmdMayFail(t, wt, "checkout", "--", p)
					case 13:
						if rng.IntN(3) == 0 {
							cmdMayFail(t, wt, "add", "-A")
							cmdMayFail(t, wt, "commit", "-q", "-m", fmt.Sprint("round ", round))
						}
					}
				}
				checkRound(t, wt, dirs, seed, round)
			}
		})
	}
}
