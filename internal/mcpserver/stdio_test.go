package mcpserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Lines that are not JSON-RPC 2.0 messages are answered with an error and
// dropped; the others pass unchanged.
func TestFilterAnswersMalformedLines(t *testing.T) {
	good := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"a","result":{}}`,
	}
	bad := map[string]int{
		`{"jsonrpc":"2.0","id":1,"method":`:                -32700,
		`not json at all`:                                  -32700,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`:       -32600,
		`{"id":7,"method":"ping"}`:                         -32600,
		`{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}`:   -32600,
		`{"jsonrpc":"2.0","id":3}`:                         -32600,
		`{"jsonrpc":"2.0","id":4,"method":"x","params":1}`: -32602,
		strings.Repeat("x", maxLine+10):                    -32700,
	}
	var in strings.Builder
	for _, g := range good {
		in.WriteString(g + "\n\n")
	}
	var order []int
	for b, code := range bad {
		in.WriteString(b + "\n")
		order = append(order, code)
	}
	var pass, out bytes.Buffer
	if err := filter(strings.NewReader(in.String()), &pass, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSpace(pass.String()), "\n"); strings.Join(got, "|") != strings.Join(good, "|") {
		t.Errorf("passed on:\n%s", pass.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(bad) {
		t.Fatalf("%d answers for %d bad lines:\n%s", len(lines), len(bad), out.String())
	}
	for i, l := range lines {
		var m struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil || m.JSONRPC != "2.0" || m.Error.Code != order[i] || m.Error.Message == "" {
			t.Errorf("answer %d: %s (want code %d)", i, l, order[i])
		}
	}
}
