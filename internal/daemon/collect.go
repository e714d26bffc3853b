package daemon

import (
	"context"
	"fmt"
	"os"

	"github.com/neuralis/neuralisfs/internal/collect"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/policy"
)

// collectReq answers the control request collect: the collection of
// req.Principal (the peer's own when empty) from req.Sources (every source
// it can see when empty) within the budgets asked for. Asking for another
// principal's needs root or the daemon's own uid.
func (d *Daemon) collectReq(ctx context.Context, p *policy.Principal, peer control.Peer, req control.Request) (*collect.Collection, error) {
	target := p
	var files func(uri string) bool
	if req.Principal == "" || req.Principal == p.Name {
		// The caller's own: only what its file permissions let it
		// read on the mount, as search and history.
		sight, done := d.peerFiles(peer)
		defer done()
		files = sight.canRead
	} else {
		if peer.UID != 0 && peer.UID != uint32(os.Geteuid()) {
			return nil, fmt.Errorf("only root or the daemon's own uid (%d) may ask for another principal's collection; you are %q", os.Geteuid(), p.Name)
		}
		var ok bool
		if target, ok = d.policy().PrincipalByName(req.Principal); !ok {
			return nil, fmt.Errorf("unknown principal %q", req.Principal)
		}
	}
	return d.collection(ctx, target, req.Sources, collect.Budget{MaxFileBytes: req.MaxFileBytes, MaxBytes: req.MaxBytes, MaxFiles: req.MaxFiles}, files)
}

// collection is p's collection from the sources named (all it can see
// when none is), by p's read decisions and, when files is not nil, only
// of the files it accepts (the caller's file permissions). git-pinned
// sources, which the index does not admit from, are left out.
func (d *Daemon) collection(ctx context.Context, p *policy.Principal, only []string, b collect.Budget, files func(uri string) bool) (*collect.Collection, error) {
	pol := d.policy()
	visible := func(slug string) bool {
		return pol.SourceVisible(p, slug) && pol.Decide(p, slug, "", policy.Read).Allowed
	}
	want := map[string]bool{}
	for _, slug := range only {
		if d.source(slug) == nil || !visible(slug) {
			return nil, fmt.Errorf("unknown source %q", slug)
		}
		want[slug] = true
	}
	var srcs []collect.Source
	for _, s := range d.srcs() {
		if !visible(s.Slug()) || len(want) > 0 && !want[s.Slug()] {
			continue
		}
		is, ok := IndexSource(s, d.live.Load().cfg)
		if !ok {
			continue
		}
		srcs = append(srcs, collect.Source{Slug: is.Slug, FS: is.FS, Rules: is.Rules()})
	}
	c, err := collect.Collect(ctx, srcs, func(u string) bool {
		slug, rel, err := policy.ParseURI(u)
		return err == nil && pol.Decide(p, slug, rel, policy.Read).Allowed && (files == nil || files(u))
	}, b)
	if err != nil {
		return nil, err
	}
	c.Principal = p.Name
	return c, nil
}

// collectionPort serves <mount>/.neuralis/collection.
type collectionPort struct{ d *Daemon }

// CollectionJSON is principal's own collection, as `collect --json` prints
// it, of the files canRead accepts (the caller's file permissions).
func (c collectionPort) CollectionJSON(ctx context.Context, principal string, canRead func(uri string) bool) ([]byte, error) {
	p, ok := c.d.policy().PrincipalByName(principal)
	if !ok {
		return nil, fmt.Errorf("unknown principal %q", principal)
	}
	col, err := c.d.collection(ctx, p, nil, collect.Budget{}, canRead)
	if err != nil {
		return nil, err
	}
	return collect.JSON(col), nil
}
