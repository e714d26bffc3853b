package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches url and parses it as the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// sample finds the metric of family name whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// requests is how many requests of op the scrape counted.
func requests(fams map[string]*dto.MetricFamily, op string) uint64 {
	m := sample(fams, "neuralisfs_fuse_request_duration_seconds", map[string]string{"op": op})
	if m == nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

func TestMetricsEndpoint(t *testing.T) {
	e := newEnv(t, `
[metrics]
listen = "127.0.0.1:0"

[[principal]]
name = "agent"
uids = [1001]

[[rule]]
uri = "data://secret.txt"
who = ["agent"]
deny = ["read"]
`, src{slug: "data"})
	writeFile(t, e.b("data", "f.txt"), "hello\n", 0o644)
	writeFile(t, e.b("data", "secret.txt"), "s\n", 0o644)
	// The log says where: the port was the kernel's choice.
	var addr []string
	eventually(t, 10*time.Second, "the daemon logs the metrics address", func() bool {
		addr = regexp.MustCompile(`msg="serving metrics" listen=(\S+)`).FindStringSubmatch(e.stderr.String())
		return addr != nil
	})
	url := "http://" + addr[1] + "/metrics"
	before := scrape(t, url)

	// Distinct absent names: each lookup reaches the daemon.
	for i := range 5 {
		os.Stat(e.m("data", fmt.Sprintf("absent-%d", i)))
	}
	for range 3 {
		if _, err := os.ReadFile(e.m("data", "f.txt")); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.Mkdir(e.m("data", "d1"), 0o755))
	must(t, os.Mkdir(e.m("data", "d2"), 0o755))
	for _, n := range []string{"n1", "n2"} {
		must(t, os.WriteFile(e.m("data", n), []byte("x"), 0o644))
	}
	if out, err := run(t, 1001, "cat "+e.m("data", "secret.txt")+" 2>&1"); err == nil {
		t.Fatalf("the agent read the secret:\n%s", out)
	}

	after := scrape(t, url)
	delta := func(op string) uint64 { return requests(after, op) - requests(before, op) }
	if d := delta("LOOKUP"); d < 5 {
		t.Errorf("LOOKUP counted %d more, want at least 5", d)
	}
	if d := delta("OPEN"); d < 3 {
		t.Errorf("OPEN counted %d more, want at least 3", d)
	}
	for op, want := range map[string]uint64{"MKDIR": 2, "CREATE": 2} {
		if d := delta(op); d != want {
			t.Errorf("%s counted %d more, want %d", op, d, want)
		}
	}
	// (WRITE is not asserted: with passthrough the kernel writes itself.)
	// Latency buckets: cumulative, ending at the count.
	h := sample(after, "neuralisfs_fuse_request_duration_seconds", map[string]string{"op": "LOOKUP"}).GetHistogram()
	if b := h.GetBucket(); len(b) == 0 || b[len(b)-1].GetCumulativeCount() > h.GetSampleCount() || h.GetSampleSum() <= 0 {
		t.Errorf("LOOKUP histogram: %v", h)
	}
	if m := sample(after, "neuralisfs_denials_total", map[string]string{"principal": "agent", "op": "lookup"}); m == nil || m.GetCounter().GetValue() < 1 {
		t.Errorf("no lookup denial counted for the agent: %v", after["neuralisfs_denials_total"])
	}
	if m := sample(after, "neuralisfs_source_status", map[string]string{"source": "data", "kind": "local"}); m == nil || m.GetGauge().GetValue() != 1 {
		t.Errorf("source status: %v", after["neuralisfs_source_status"])
	}
	for _, name := range []string{"neuralisfs_index_documents", "neuralisfs_index_queue", "neuralisfs_journal_bytes", "neuralisfs_journal_records", "neuralisfs_reloads_total"} {
		if after[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}
	if m := sample(after, "neuralisfs_journal_records", nil); m == nil || m.GetGauge().GetValue() < 2 {
		t.Errorf("journal records after two creates: %v", after["neuralisfs_journal_records"])
	}
}

func TestMetricsOnAUnixSocket(t *testing.T) {
	sock := filepath.Join(sharedTempDir(t), "metrics.sock")
	e := newEnv(t, fmt.Sprintf("\n[metrics]\nlisten = %q\n", sock), src{slug: "data"})
	os.Stat(e.m("data", "absent"))
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := c.Get("http://neuralisfs/metrics")
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(t, err)
	if out := string(body); !strings.Contains(out, `neuralisfs_fuse_request_duration_seconds_count{op="LOOKUP"}`) {
		t.Errorf("metrics over the unix socket:\n%s", out)
	}
	e.stop()
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("the metrics socket %s is left after the daemon exited", sock)
	}
}

func TestMetricsListenIsValidated(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	must(t, os.WriteFile(cfg, []byte("state_dir = \"/tmp/x\"\n\n[metrics]\nlisten = \"metrics.sock\"\n"), 0o644))
	out, err := run(t, 0, binPath+" config validate -c "+cfg+" 2>&1")
	want := cfg + `:4: metrics.listen: "metrics.sock" is neither host:port`
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("config validate with a bad metrics.listen: %v\n%s\nwant %q", err, out, want)
	}
}
