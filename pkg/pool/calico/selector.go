package calico

import (
	"fmt"
	"strings"
	"unicode"
)

// selector is a parsed Calico label selector (an IPPool's nodeSelector).
// Calico's syntax is not Kubernetes': `all()`, `has(k)`, `!has(k)`,
// `k == 'v'`, `k != "v"`, `k in {'a', 'b'}`, `k not in {...}`,
// `k starts with 'p'`, `ends with`, `contains`, `!`, `&&`, `||` and
// parentheses. This is the part of it that pool selectors use; anything
// else does not parse, and the pool is one netready cannot judge.
type selector interface {
	matches(labels map[string]string) bool
}

type allSel struct{}

func (allSel) matches(map[string]string) bool { return true }

type hasSel struct{ key string }

func (s hasSel) matches(l map[string]string) bool { _, ok := l[s.key]; return ok }

type notSel struct{ s selector }

func (s notSel) matches(l map[string]string) bool { return !s.s.matches(l) }

type andSel struct{ a, b selector }

func (s andSel) matches(l map[string]string) bool { return s.a.matches(l) && s.b.matches(l) }

type orSel struct{ a, b selector }

func (s orSel) matches(l map[string]string) bool { return s.a.matches(l) || s.b.matches(l) }

// cmpSel compares a label's value; a missing label matches only the
// negated operators (!=, not in), as in Calico.
type cmpSel struct {
	key, op string
	values  []string
}

func (s cmpSel) matches(l map[string]string) bool {
	v, ok := l[s.key]
	switch s.op {
	case "==":
		return ok && v == s.values[0]
	case "!=":
		return !ok || v != s.values[0]
	case "in":
		return ok && contains(s.values, v)
	case "not in":
		return !ok || !contains(s.values, v)
	case "starts with":
		return ok && strings.HasPrefix(v, s.values[0])
	case "ends with":
		return ok && strings.HasSuffix(v, s.values[0])
	case "contains":
		return ok && strings.Contains(v, s.values[0])
	}
	return false
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// parseSelector parses a Calico selector; the empty selector is all(), as
// Calico defaults an IPPool's nodeSelector.
func parseSelector(s string) (selector, error) {
	p := &selParser{in: s}
	if strings.TrimSpace(s) == "" {
		return allSel{}, nil
	}
	sel, err := p.or()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.in) {
		return nil, fmt.Errorf("unexpected %q at offset %d", p.in[p.pos:], p.pos)
	}
	return sel, nil
}

type selParser struct {
	in  string
	pos int
}

func (p *selParser) space() {
	for p.pos < len(p.in) && unicode.IsSpace(rune(p.in[p.pos])) {
		p.pos++
	}
}

// eat consumes tok (after spaces) when it comes next.
func (p *selParser) eat(tok string) bool {
	p.space()
	if strings.HasPrefix(p.in[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

// word consumes a keyword that is not the start of a longer label key.
func (p *selParser) word(w string) bool {
	p.space()
	rest := p.in[p.pos:]
	if !strings.HasPrefix(rest, w) || len(rest) > len(w) && isKeyChar(rest[len(w)]) {
		return false
	}
	p.pos += len(w)
	return true
}

func (p *selParser) or() (selector, error) {
	a, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.eat("||") {
		b, err := p.and()
		if err != nil {
			return nil, err
		}
		a = orSel{a, b}
	}
	return a, nil
}

func (p *selParser) and() (selector, error) {
	a, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.eat("&&") {
		b, err := p.unary()
		if err != nil {
			return nil, err
		}
		a = andSel{a, b}
	}
	return a, nil
}

func (p *selParser) unary() (selector, error) {
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == '!' && !strings.HasPrefix(p.in[p.pos:], "!=") {
		p.pos++
		s, err := p.unary()
		if err != nil {
			return nil, err
		}
		return notSel{s}, nil
	}
	if p.eat("(") {
		s, err := p.or()
		if err != nil {
			return nil, err
		}
		if !p.eat(")") {
			return nil, fmt.Errorf("missing ) at offset %d", p.pos)
		}
		return s, nil
	}
	if p.word("all") {
		if !p.eat("(") || !p.eat(")") {
			return nil, fmt.Errorf("all must be all() (offset %d)", p.pos)
		}
		return allSel{}, nil
	}
	if p.word("has") && p.eat("(") {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		if !p.eat(")") {
			return nil, fmt.Errorf("missing ) after has(%s", k)
		}
		return hasSel{k}, nil
	}
	return p.comparison()
}

func (p *selParser) comparison() (selector, error) {
	k, err := p.key()
	if err != nil {
		return nil, err
	}
	for _, op := range []string{"==", "!="} {
		if p.eat(op) {
			v, err := p.str()
			if err != nil {
				return nil, err
			}
			return cmpSel{k, op, []string{v}}, nil
		}
	}
	for _, op := range []string{"starts with", "ends with", "contains"} {
		w := strings.Fields(op)
		save := p.pos
		ok := true
		for _, x := range w {
			ok = ok && p.word(x)
		}
		if !ok {
			p.pos = save
			continue
		}
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		return cmpSel{k, op, []string{v}}, nil
	}
	op := "in"
	save := p.pos
	if p.word("not") && p.word("in") {
		op = "not in"
	} else if p.pos = save; !p.word("in") {
		return nil, fmt.Errorf("expected an operator after %q at offset %d", k, p.pos)
	}
	if !p.eat("{") {
		return nil, fmt.Errorf("expected { after %s at offset %d", op, p.pos)
	}
	var vals []string
	for !p.eat("}") {
		if len(vals) > 0 && !p.eat(",") {
			return nil, fmt.Errorf("expected , or } at offset %d", p.pos)
		}
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
	}
	return cmpSel{k, op, vals}, nil
}

func isKeyChar(c byte) bool {
	return c == '_' || c == '.' || c == '/' || c == '-' ||
		c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *selParser) key() (string, error) {
	p.space()
	start := p.pos
	for p.pos < len(p.in) && isKeyChar(p.in[p.pos]) {
		p.pos++
	}
	if start == p.pos {
		return "", fmt.Errorf("expected a label key at offset %d", start)
	}
	return p.in[start:p.pos], nil
}

// str reads a quoted value: Calico takes 'single' or "double" quotes.
func (p *selParser) str() (string, error) {
	p.space()
	if p.pos >= len(p.in) || p.in[p.pos] != '\'' && p.in[p.pos] != '"' {
		return "", fmt.Errorf("expected a quoted value at offset %d", p.pos)
	}
	q := p.in[p.pos]
	end := strings.IndexByte(p.in[p.pos+1:], q)
	if end < 0 {
		return "", fmt.Errorf("unterminated string at offset %d", p.pos)
	}
	v := p.in[p.pos+1 : p.pos+1+end]
	p.pos += end + 2
	return v, nil
}
