package gitfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusRandomMatchesGit applies random worktree and index operations
// to a repository and compares Status with git status at the root and in
// every folder after each round.
func TestStatusRandomMatchesGit(t *testing.T) {
	for _, seed := range randomSeeds([]uint64{1, 2, 3, 4, 5, 6}, 2, 1000) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			gitEnv(t)
			rng := rand.New(rand.NewPCG(seed, 99))
			wt := newRepo(t)
			names := []string{"a", "b.txt", "c.log", "d e", "é", "x.tmp"}
			dirs := []string{"", "p", "p/q", "r", "r/s/t", "ign"}
			write(t, wt, ".gitignore", "*.log\nign/\n")
			if seed%2 == 0 {
				// Every index write is a split index on top of a shared one.
				git(t, wt, "config", "core.splitIndex", "true")
			}
			randPath := func() string { return randomPath(rng, dirs, names) }
			content := func() string {
				var b strings.Builder
				for range rng.IntN(30) {
					fmt.Fprintf(&b, "line %d\n", rng.IntN(8))
				}
				return b.String()
			}
			for round := range 6 {
				for range 12 {
					p := randPath()
					abs := filepath.Join(wt, filepath.FromSlash(p))
					switch rng.IntN(10) {
					case 0, 1, 2:
						os.RemoveAll(abs) // a directory in the way of a file
						write(t, wt, p, content())
					case 3:
						os.Remove(abs)
					case 4:
						os.Chmod(abs, 0o755)
					case 5:
						os.MkdirAll(filepath.Dir(abs), 0o755)
						os.RemoveAll(abs)
						os.Symlink(names[rng.IntN(len(names))], abs)
					case 6:
						cmdMayFail(t, wt, "add", "-A", "--", filepath.Dir(p))
					case 7:
						q := randPath()
						os.MkdirAll(filepath.Join(wt, filepath.Dir(filepath.FromSlash(q))), 0o755)
						cmdMayFail(t, wt, "mv", "-k", p, q)
					case 8:
						cmdMayFail(t, wt, "rm", "-q", "--cached", "--ignore-unmatch", p)
					case 9:
						if rng.IntN(3) == 0 {
							commitAll(t, wt, fmt.Sprintf("round %d", round))
						}
					}
				}
				checkRound(t, wt, dirs, seed, round)
			}
			if m, _ := filepath.Glob(filepath.Join(wt, ".git", "sharedindex.*")); seed%2 == 0 && len(m) == 0 {
				t.Error("core.splitIndex set but no shared index was written")
			}
		})
	}
}

// randomSeeds is defaults, or the first short of them under -short, or
// GITFS_RANDOM_SEEDS=N seeds counted from base.
func randomSeeds(defaults []uint64, short int, base uint64) []uint64 {
	if n := os.Getenv("GITFS_RANDOM_SEEDS"); n != "" {
		var k uint64
		fmt.Sscan(n, &k)
		var seeds []uint64
		for i := range k {
			seeds = append(seeds, base+i)
		}
		return seeds
	}
	if testing.Short() {
		return defaults[:short]
	}
	return defaults
}

// randomPath is a name from names in a folder from dirs ("" is the top).
func randomPath(rng *rand.Rand, dirs, names []string) string {
	d := dirs[rng.IntN(len(dirs))]
	n := names[rng.IntN(len(names))]
	if d == "" {
		return n
	}
	return d + "/" + n
}

// checkRound compares Status with git status at the top and in every
// folder of dirs that is still a folder, and stops the test at the first
// round that differs.
func checkRound(t *testing.T, wt string, dirs []string, seed uint64, round int) {
	t.Helper()
	check := []string{""}
	for _, d := range dirs {
		if fi, err := os.Lstat(filepath.Join(wt, d)); d != "" && err == nil && fi.IsDir() {
			check = append(check, d)
		}
	}
	checkStatus(t, wt, check...)
	if t.Failed() {
		t.Fatalf("seed %d round %d differs; stopping", seed, round)
	}
}
