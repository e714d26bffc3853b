package index

import (
	"context"
	"fmt"
	"testing/fstest"
	"time"

	"github.com/blevesearch/bleve/v2"
)

// OverlayDoc is a file SearchOverlay searches: its content and mtime.
type OverlayDoc struct {
	Content []byte
	ModTime time.Time
}

// SearchOverlay runs q over docs (files by uri) as if they were
// the only files of their sources, for a caller whose view of some files
// differs from the backing ones (held writes, DESIGN.md §12). Each
// document is admitted by the rules of its source in x (name, include,
// exclude, size, text), analysed, matched and cut into snippets exactly as
// Search does, in a memory-only index made for the call and dropped after
// it; nothing of docs reaches x. Documents of sources not added to x are
// skipped. canRead filters as for Search. Scores come from the overlay's
// own term statistics and are not comparable with Search's.
func (x *Index) SearchOverlay(ctx context.Context, q Query, docs map[string]OverlayDoc, canRead func(uri string) bool) (Result, error) {
	bySlug := map[string]fstest.MapFS{}
	for u, d := range docs {
		slug, p, ok := SplitURI(u)
		if !ok {
			continue
		}
		if _, _, known := x.sourceFS(slug); !known {
			continue
		}
		m := bySlug[slug]
		if m == nil {
			m = fstest.MapFS{}
			bySlug[slug] = m
		}
		m[p] = &fstest.MapFile{Data: d.Content, Mode: 0o644, ModTime: d.ModTime}
	}
	mem, err := bleve.NewMemOnly(newMapping())
	if err != nil {
		return Result{}, fmt.Errorf("overlay index: %w", err)
	}
	defer mem.Close()
	ox := &Index{log: x.log, bleve: mem, sources: map[string]*source{}, overlay: true}
	batch := mem.NewBatch()
	for slug, m := range bySlug {
		_, rules, _ := x.sourceFS(slug)
		s := &source{Source: Source{Slug: slug, FS: m}, rules: rules, files: map[string]metaEntry{}}
		ox.sources[slug] = s
		for p := range m {
			pr, err := prepare(m, p, rules, nil, nil)
			if err != nil || !pr.ok {
				continue
			}
			a := contentFrequencies(pr.content)
			pr.terms, pr.content = &a, nil
			// size: and mtime: ranges are answered from files.
			s.files[p] = metaEntry{size: pr.size, mtime: pr.mtime, digest: pr.digest, indexed: true}
			if err := batch.IndexAdvanced(ox.document(slug, &pr)); err != nil {
				return Result{}, fmt.Errorf("overlay index: %w", err)
			}
		}
	}
	if err := mem.Batch(batch); err != nil {
		return Result{}, fmt.Errorf("overlay index: %w", err)
	}
	return ox.Search(ctx, q, canRead)
}
