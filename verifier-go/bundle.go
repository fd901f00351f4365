// The evidence bundle's verdict (docs/receipts.md, "Evidence bundles"), from the
// specification alone: the hash chain of docs/canonical-form.md and the Ed25519 checkpoint.
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

const bundleFormat = "recon.bundle/1"
const genesis = "0000000000000000000000000000000000000000000000000000000000000000"

type Verdict struct {
	Verdict string `json:"verdict"`
	Problem string `json:"problem,omitempty"`
}

type findings struct{ invalid, unverifiable string }

func (f *findings) bad(format string, args ...any) {
	if f.invalid == "" {
		f.invalid = fmt.Sprintf(format, args...)
	}
}

func (f *findings) unknown(format string, args ...any) {
	if f.unverifiable == "" {
		f.unverifiable = fmt.Sprintf(format, args...)
	}
}

// KeyID is the first 16 hex digits of the SHA-256 of the raw public key.
func KeyID(public ed25519.PublicKey) string {
	sum := sha256.Sum256(public)
	return hex.EncodeToString(sum[:])[:16]
}

// LoadKeys reads a verify keys file ({"keys": [{"key_id", "public_key"}]}).
func LoadKeys(path string) (map[string]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Keys []struct {
			KeyID     string `json:"key_id"`
			PublicKey string `json:"public_key"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range doc.Keys {
		raw, err := base64.StdEncoding.DecodeString(k.PublicKey)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("key %s: not a base64 32-byte Ed25519 public key", k.KeyID)
		}
		if KeyID(raw) != k.KeyID {
			return nil, fmt.Errorf("key %s: the id is not its key's (%s)", k.KeyID, KeyID(raw))
		}
		keys[k.KeyID] = raw
	}
	return keys, nil
}

// VerifyBundle gives a bundle's verdict: INVALID wins over UNVERIFIABLE, which wins over VALID.
func VerifyBundle(data []byte, keys map[string]ed25519.PublicKey) Verdict {
	parsed, err := decode(data)
	bundle, ok := parsed.(map[string]any)
	if err != nil || !ok {
		return Verdict{"UNVERIFIABLE", "not a JSON object"}
	}
	if bundle["format"] != bundleFormat {
		return Verdict{"UNVERIFIABLE", fmt.Sprintf("bundle format %v is not %s", bundle["format"], bundleFormat)}
	}
	events, _ := bundle["events"].([]any)
	if len(events) == 0 {
		return Verdict{"INVALID", "the bundle holds no events"}
	}
	f := &findings{}
	prev := genesis
	hashes := map[int64]string{}
	for i, item := range events {
		seq := int64(i + 1)
		event, ok := item.(map[string]any)
		if !ok {
			f.bad("event %d: not a JSON object", seq)
			break
		}
		where := fmt.Sprintf("seq %v", event["seq"])
		if event["tenant"] != bundle["tenant"] || event["tx_id"] != bundle["tx_id"] {
			f.bad("%s: an event of another transaction", where)
		}
		if n, ok := event["seq"].(json.Number); !ok || n.String() != fmt.Sprint(seq) {
			f.bad("%s where %d was expected (an event removed or moved)", where, seq)
		}
		if event["prev_hash"] != prev {
			f.bad("%s: prev_hash is not the previous event's hash", where)
		}
		content := map[string]any{}
		for k, v := range event {
			if k != "hash" {
				content[k] = v
			}
		}
		var canonical []byte
		switch canon, present := event["canon"]; {
		case !present:
			canonical, err = Legacy(content)
		case canon == "jcs":
			canonical, err = JCS(content)
		default:
			err = fmt.Errorf("%w: canonical form %v is not supported", errUnsupported, canon)
		}
		prevHash, _ := event["prev_hash"].(string)
		switch {
		case errors.Is(err, errUnsupported):
			f.unknown("%s: %v", where, err)
		case err != nil:
			f.bad("%s: %v", where, err)
		default:
			sum := sha256.Sum256(append([]byte(prevHash), canonical...))
			if hex.EncodeToString(sum[:]) != event["hash"] {
				f.bad("%s: hash does not match its content", where)
			}
		}
		prev, _ = event["hash"].(string)
		hashes[seq] = prev
	}
	checkCheckpoint(bundle, keys, hashes, int64(len(events)), f)
	switch {
	case f.invalid != "":
		return Verdict{"INVALID", f.invalid}
	case f.unverifiable != "":
		return Verdict{"UNVERIFIABLE", f.unverifiable}
	}
	return Verdict{"VALID", ""}
}

func checkCheckpoint(bundle map[string]any, keys map[string]ed25519.PublicKey, hashes map[int64]string, last int64, f *findings) {
	raw, present := bundle["checkpoint"]
	if !present || raw == nil {
		f.unknown("no signed checkpoint covers this transaction")
		return
	}
	checkpoint, ok := raw.(map[string]any)
	if !ok {
		f.bad("the checkpoint is not a JSON object")
		return
	}
	if checkpoint["type"] != "ChainCheckpoint" || checkpoint["canon"] != "jcs" {
		f.unknown("checkpoint: not a ChainCheckpoint in a supported form")
		return
	}
	kid, _ := checkpoint["key_id"].(string)
	public, known := keys[kid]
	if !known {
		f.unknown("checkpoint: signing key %q is not among the known keys", kid)
		return
	}
	body := map[string]any{}
	for k, v := range checkpoint {
		if k != "signature" {
			body[k] = v
		}
	}
	signed, err := JCS(body)
	sigText, _ := checkpoint["signature"].(string)
	signature, decodeErr := base64.StdEncoding.DecodeString(sigText)
	if err != nil || decodeErr != nil || !ed25519.Verify(public, signed, signature) {
		f.bad("checkpoint: the signature does not hold under key %s", kid)
		return
	}
	heads, _ := checkpoint["heads"].([]any)
	var mine []map[string]any
	for _, h := range heads {
		if head, ok := h.(map[string]any); ok && head["tenant"] == bundle["tenant"] && head["tx_id"] == bundle["tx_id"] {
			mine = append(mine, head)
		}
	}
	if len(mine) != 1 {
		f.bad("the checkpoint does not sign this transaction's head")
		return
	}
	n, _ := mine[0]["seq"].(json.Number)
	seq, err := n.Int64()
	hash, held := hashes[seq]
	if err != nil || !held {
		f.bad("the checkpoint signs seq %s, but the events end at seq %d (events removed)", n, last)
		return
	}
	if hash != mine[0]["hash"] {
		f.bad("seq %d: hash is not the one the checkpoint signed (a rewritten chain)", seq)
		return
	}
	if seq < last {
		f.unknown("events after seq %d are not covered by a signature yet", seq)
	}
}
