package consumer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"
)

// The bounds every consumer of the repository shares (vectors/README.md, "Bounds").
const (
	// MaxRecordBytes: a larger value (or structured event) is skipped as too_large.
	MaxRecordBytes = 16 << 20
	// MaxDepth: JSON nested deeper is too_deep; a patch may not nest an object deeper.
	MaxDepth = 127
	// MaxValues: the most JSON values a patched object may hold.
	MaxValues = 2_000_000
)

// checkJSON finds the first problem of b read left to right (vectors/README.md, "JSON"):
// nesting deeper than MaxDepth (too_deep), the end of the text before the value's
// (truncated), anything else that is not RFC 8259 JSON or a number beyond a float64
// (not_json).
func checkJSON(b []byte) error {
	if !utf8.Valid(b) {
		return badf("not_json", "the value is not UTF-8")
	}
	s := scanner{b: b}
	return s.document()
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) fail(reason, what string) error {
	return badf(reason, "%s at byte %d", what, s.i)
}

func (s *scanner) end() error { return badf("truncated", "the text ends early") }

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) document() error {
	// Each open container: '[' or '{'.
	var stack []byte
	s.ws()
	value := true
	for {
		if value {
			if s.i == len(s.b) {
				return s.end()
			}
			c := s.b[s.i]
			if c == '[' || c == '{' {
				if len(stack) >= MaxDepth {
					return s.fail("too_deep", fmt.Sprintf("nested deeper than %d levels", MaxDepth))
				}
				stack = append(stack, c)
				s.i++
				s.ws()
				if s.i < len(s.b) && s.b[s.i] == closer(c) {
					stack = stack[:len(stack)-1]
					s.i++
					value = false
				} else if c == '{' {
					if err := s.key(); err != nil {
						return err
					}
				}
				continue
			}
			if err := s.scalar(); err != nil {
				return err
			}
			value = false
			continue
		}
		s.ws()
		if len(stack) == 0 {
			if s.i != len(s.b) {
				return s.fail("not_json", "text after the value")
			}
			return nil
		}
		if s.i == len(s.b) {
			return s.end()
		}
		switch c := s.b[s.i]; {
		case c == ',':
			s.i++
			s.ws()
			if stack[len(stack)-1] == '{' {
				if err := s.key(); err != nil {
					return err
				}
			}
			value = true
		case c == closer(stack[len(stack)-1]):
			stack = stack[:len(stack)-1]
			s.i++
		default:
			return s.fail("not_json", fmt.Sprintf("unexpected %q", c))
		}
	}
}

func closer(open byte) byte {
	if open == '[' {
		return ']'
	}
	return '}'
}

// key reads a member's name and colon.
func (s *scanner) key() error {
	if s.i == len(s.b) {
		return s.end()
	}
	if s.b[s.i] != '"' {
		return s.fail("not_json", "a member without a string name")
	}
	if err := s.str(); err != nil {
		return err
	}
	s.ws()
	if s.i == len(s.b) {
		return s.end()
	}
	if s.b[s.i] != ':' {
		return s.fail("not_json", "a member without a colon")
	}
	s.i++
	s.ws()
	return nil
}

func (s *scanner) scalar() error {
	c := s.b[s.i]
	switch {
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		rest := s.b[s.i:]
		if bytes.HasPrefix(rest, []byte(lit)) {
			s.i += len(lit)
			return nil
		}
		if len(rest) < len(lit) && bytes.HasPrefix([]byte(lit), rest) {
			return s.end()
		}
	}
	return s.fail("not_json", fmt.Sprintf("unexpected %q", c))
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// str reads a string: no control characters, known escapes, surrogate escapes in pairs.
func (s *scanner) str() error {
	s.i++
	for {
		if s.i >= len(s.b) {
			return s.end()
		}
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return nil
		case c < 0x20:
			return s.fail("not_json", "a control character in a string")
		case c != '\\':
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return s.end()
		}
		switch s.b[s.i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.i += 2
			continue
		case 'u':
		default:
			return s.fail("not_json", "a bad escape")
		}
		r, ok := s.escape(s.i + 2)
		if !ok {
			if s.escapeCut(s.i + 2) {
				return s.end()
			}
			return s.fail("not_json", "a bad \\u escape")
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return s.fail("not_json", "a lone surrogate escape")
		case r >= 0xD800 && r <= 0xDBFF:
			next := s.i + 6
			if next+1 < len(s.b) && s.b[next] == '\\' && s.b[next+1] == 'u' {
				if low, ok := s.escape(next + 2); ok && low >= 0xDC00 && low <= 0xDFFF {
					s.i = next + 6
					continue
				}
			}
			return s.fail("not_json", "a lone surrogate escape")
		}
		s.i += 6
	}
}

func (s *scanner) escape(at int) (rune, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	for _, c := range s.b[at : at+4] {
		if !isHex(c) {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(string(s.b[at:at+4]), 16, 32)
	return rune(n), err == nil
}

// escapeCut: the text ends inside a \u escape.
func (s *scanner) escapeCut(at int) bool {
	for _, c := range s.b[at:] {
		if !isHex(c) {
			return false
		}
	}
	return len(s.b)-at < 4
}

func (s *scanner) number() error {
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i == len(s.b) {
		return s.end()
	}
	switch {
	case s.b[s.i] == '0':
		s.i++
	case s.b[s.i] >= '1' && s.b[s.i] <= '9':
		digits()
	default:
		return s.fail("not_json", "a bad number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			if s.i == len(s.b) {
				return s.end()
			}
			return s.fail("not_json", "a bad number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			if s.i == len(s.b) {
				return s.end()
			}
			return s.fail("not_json", "a bad number")
		}
	}
	if f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err != nil && math.IsInf(f, 0) {
		s.i = start
		return s.fail("not_json", "a number beyond a 64-bit float")
	}
	return nil
}

// parseJSON is the value of b, numbers as json.Number, or why it is not JSON.
func parseJSON(b []byte) (any, error) {
	if err := checkJSON(b); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, badf("not_json", "%v", err)
	}
	return v, nil
}

// measure is how many JSON values v holds (itself included) and its depth (0 for a
// scalar, 1 for {} or [1]).
func measure(v any) (count, depth int) {
	var items []any
	switch x := v.(type) {
	case map[string]any:
		for _, y := range x {
			items = append(items, y)
		}
	case []any:
		items = x
	default:
		return 1, 0
	}
	count = 1
	for _, y := range items {
		c, d := measure(y)
		count += c
		depth = max(depth, d)
	}
	return count, depth + 1
}

// clone copies a JSON value.
func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, y := range x {
			out[k] = clone(y)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = clone(y)
		}
		return out
	}
	return v
}

var (
	minInt = new(big.Int).Lsh(big.NewInt(-1), 63)
	maxInt = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1))
)

// number: an integer within 64 bits (exact), or else a float64.
func number(n json.Number) (*big.Int, float64) {
	if i, ok := new(big.Int).SetString(n.String(), 10); ok && i.Cmp(minInt) >= 0 && i.Cmp(maxInt) <= 0 {
		return i, 0
	}
	f, _ := strconv.ParseFloat(n.String(), 64)
	return nil, f
}

// same is JSON equality: an integer never equals a float; member order does not count.
func same(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !same(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !same(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		xi, xf := number(x)
		yi, yf := number(y)
		if xi != nil || yi != nil {
			return xi != nil && yi != nil && xi.Cmp(yi) == 0
		}
		return xf == yf
	}
	return a == b
}
