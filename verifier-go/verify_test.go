package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The vectors recon publishes (docs/vectors/): this verifier must reach the same verdicts
// as recon's own (events/bundle.py) from the specification alone.
const vectors = "../docs/vectors"

func TestCanonicalVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(vectors, "canonical.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct{ Name, Input, Canonical string } `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 8 {
		t.Fatalf("only %d cases", len(doc.Cases))
	}
	for _, c := range doc.Cases {
		v, err := decode([]byte(c.Input))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		out, err := JCS(v)
		if err != nil || string(out) != c.Canonical {
			t.Errorf("%s: got %s (%v), want %s", c.Name, out, err, c.Canonical)
		}
	}
}

func TestBundleVectors(t *testing.T) {
	keys, err := LoadKeys(filepath.Join(vectors, "bundles", "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(vectors, "bundles", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]struct{ Verdict string }
	if err := json.Unmarshal(data, &expected); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"valid", "tampered-payload", "removed-event", "reordered", "wrong-key", "unknown-key", "linked-checkpoint", "tampered-link"} {
		if _, ok := expected[name]; !ok {
			t.Errorf("vector %s is missing", name)
		}
	}
	for name, want := range expected {
		bundle, err := os.ReadFile(filepath.Join(vectors, "bundles", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		got := VerifyBundle(bundle, keys)
		if got.Verdict != want.Verdict {
			t.Errorf("%s: %s (%s), want %s", name, got.Verdict, got.Problem, want.Verdict)
		}
	}
}

func TestKeyIDIsDerived(t *testing.T) {
	keys, err := LoadKeys(filepath.Join(vectors, "bundles", "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	for id, key := range keys {
		if KeyID(key) != id {
			t.Errorf("%s != %s", KeyID(key), id)
		}
	}
}
