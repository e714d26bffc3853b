package journal

// Stats is how much the journal holds, for the daemon's metrics.
type Stats struct {
	Records int   // records kept
	Objects int   // distinct contents kept
	Bytes   int64 // bytes of the kept contents (what max_bytes bounds)
	Dropped int64 // records dropped by max_records over the journal's life
}

// Stats returns the journal's current size.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Stats{Records: len(j.recs), Objects: len(j.objects), Bytes: j.total, Dropped: j.drop.Records}
}
