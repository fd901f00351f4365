// Canonical JSON as docs/canonical-form.md specifies it, written from the specification
// alone (no recon code): RFC 8785 (JCS) for envelopes that say "canon":"jcs", and the
// legacy form for envelopes without "canon", restricted here to integral numbers (recon's
// own events have no others; a legacy event with a fraction is reported unverifiable).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// errUnsupported marks content this verifier cannot canonicalize in the form asked for:
// the verdict is UNVERIFIABLE, not INVALID.
var errUnsupported = errors.New("unsupported")

// decode parses JSON keeping numbers as their literal text.
func decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// JCS serializes v (as decode returns it) per RFC 8785.
func JCS(v any) ([]byte, error) {
	var b bytes.Buffer
	err := write(&b, v, true)
	return b.Bytes(), err
}

// Legacy serializes v in the legacy-json form: code point key order, integers as written.
func Legacy(v any) ([]byte, error) {
	var b bytes.Buffer
	err := write(&b, v, false)
	return b.Bytes(), err
}

func write(b *bytes.Buffer, v any, jcs bool) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		writeString(b, x)
	case json.Number:
		text, err := number(string(x), jcs)
		if err != nil {
			return err
		}
		b.WriteString(text)
	case []any:
		b.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := write(b, item, jcs); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		if jcs {
			sort.Slice(keys, func(i, j int) bool { return lessUTF16(keys[i], keys[j]) })
		} else {
			sort.Strings(keys) // bytewise UTF-8 is code point order
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			if err := write(b, x[k], jcs); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return nil
}

// lessUTF16 orders member names by their UTF-16 code units (RFC 8785 section 3.2.3).
func lessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

func writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func number(literal string, jcs bool) (string, error) {
	if !jcs {
		if _, err := strconv.ParseInt(literal, 10, 64); err == nil {
			return literal, nil
		}
		if strings.ContainsAny(literal, ".eE") {
			return "", fmt.Errorf("%w: a non-integral number in a legacy-json event", errUnsupported)
		}
		return literal, nil // an integer beyond 64 bits: its digits, as Python writes them
	}
	f, err := strconv.ParseFloat(literal, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("number %s is not an IEEE 754 double", literal)
	}
	return es6(f), nil
}

// es6 prints f as ECMAScript's Number.prototype.toString does (RFC 8785 section 3.2.2.3).
func es6(f float64) string {
	if f == 0 {
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// Shortest round-tripping digits: "d.ddddde±XX".
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mantissa, expText, _ := strings.Cut(e, "e")
	digits := strings.Replace(mantissa, ".", "", 1)
	exp, _ := strconv.Atoi(expText)
	k, n := len(digits), exp+1
	var out string
	switch {
	case k <= n && n <= 21:
		out = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		out = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		out = "0." + strings.Repeat("0", -n) + digits
	default:
		exponent := strconv.Itoa(n - 1)
		if n-1 >= 0 {
			exponent = "+" + exponent
		}
		if k == 1 {
			out = digits + "e" + exponent
		} else {
			out = digits[:1] + "." + digits[1:] + "e" + exponent
		}
	}
	return sign + out
}
