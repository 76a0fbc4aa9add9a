package testenv

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// PromQLRefs are the metric and label names a PromQL expression reads.
type PromQLRefs struct {
	// Metrics are the metric names of its selectors (a histogram's as written: name_bucket).
	Metrics []string
	// Labels are the label names of its matchers, grouping clauses (by, without) and vector
	// matching clauses (on, ignoring, group_left, group_right).
	Labels []string
}

// Words of PromQL that are not metric names where they stand as bare identifiers.
var (
	promqlGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
		"inf": true, "nan": true, "start": true, "end": true}
)

type promqlToken struct {
	kind byte // 'i' identifier, 's' string, 'n' number, 'p' punctuation or operator
	text string
}

// tokenizePromQL splits expr into identifiers, strings (their value), numbers and punctuation;
// range and subquery brackets ([5m], [1h:1m]) are dropped with their content. It returns an error
// on a character PromQL has no use for, an unterminated string or bracket.
func tokenizePromQL(expr string) ([]promqlToken, error) {
	var out []promqlToken
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			var b strings.Builder
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' && j+1 < len(expr) {
					j++
				}
				b.WriteByte(expr[j])
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			out = append(out, promqlToken{'s', b.String()})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated [ at %d in %q", i, expr)
			}
			i += j + 1
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(expr) && (isIdent(expr[j]) || expr[j] == '.' ||
				(expr[j] == '+' || expr[j] == '-') && (expr[j-1] == 'e' || expr[j-1] == 'E') && !strings.HasPrefix(expr[i:], "0x")) {
				j++
			}
			out = append(out, promqlToken{'n', expr[i:j]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			out = append(out, promqlToken{'i', expr[i:j]})
			i = j
		case strings.ContainsRune("(){},+-*/%^@", rune(c)):
			out = append(out, promqlToken{'p', string(c)})
			i++
		case c == '=' || c == '!' || c == '<' || c == '>':
			j := i + 1
			if j < len(expr) && (expr[j] == '=' || expr[j] == '~') {
				j++
			}
			if expr[i:j] == "!" {
				return nil, fmt.Errorf("lone ! at %d in %q", i, expr)
			}
			out = append(out, promqlToken{'p', expr[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q at %d in %q", c, i, expr)
		}
	}
	return out, nil
}

// ParsePromQLRefs returns the metric and label names expr reads (each once, sorted). It is a
// tokenizer, not a parser (github.com/prometheus/prometheus is not a dependency): an identifier
// followed by "(" is a function or aggregation, one of the grouping words is followed by a list of
// labels, the identifiers of a {...} matcher list are labels (a __name__ matcher's value is a
// metric), keywords and numbers are skipped, and any other identifier is a metric name. promtool
// check rules is the parser that says the expression is valid.
func ParsePromQLRefs(expr string) (PromQLRefs, error) {
	toks, err := tokenizePromQL(expr)
	if err != nil {
		return PromQLRefs{}, err
	}
	metrics, labels := map[string]bool{}, map[string]bool{}
	next := func(i int) promqlToken {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return promqlToken{}
	}
	// matchers reads a {...} list starting at toks[i] == "{" and returns the index after "}".
	matchers := func(i int) (int, error) {
		i++
		for i < len(toks) && toks[i].text != "}" {
			if toks[i].text == "," {
				i++
				continue
			}
			if i+2 >= len(toks) || toks[i].kind != 'i' || toks[i+1].kind != 'p' || toks[i+2].kind != 's' {
				return 0, fmt.Errorf("malformed matcher list in %q", expr)
			}
			switch toks[i+1].text {
			case "=", "!=", "=~", "!~":
			default:
				return 0, fmt.Errorf("matcher operator %q in %q", toks[i+1].text, expr)
			}
			if toks[i].text == "__name__" {
				if toks[i+1].text != "=" {
					return 0, fmt.Errorf("only __name__=\"...\" is supported, in %q", expr)
				}
				metrics[toks[i+2].text] = true
			} else {
				labels[toks[i].text] = true
			}
			i += 3
		}
		if i >= len(toks) {
			return 0, fmt.Errorf("unterminated { in %q", expr)
		}
		return i + 1, nil
	}
	depth := 0
	for i := 0; i < len(toks); {
		t := toks[i]
		switch {
		case t.text == "(":
			depth++
			i++
		case t.text == ")":
			depth--
			if depth < 0 {
				return PromQLRefs{}, fmt.Errorf("unbalanced ) in %q", expr)
			}
			i++
		case t.text == "{":
			if i, err = matchers(i); err != nil {
				return PromQLRefs{}, err
			}
		case t.kind == 'i' && promqlGrouping[t.text]:
			i++
			if next(i-1).text != "(" {
				if t.text == "group_left" || t.text == "group_right" {
					continue // no label list
				}
				return PromQLRefs{}, fmt.Errorf("%s without a label list in %q", t.text, expr)
			}
			for i++; i < len(toks) && toks[i].text != ")"; i++ {
				switch {
				case toks[i].kind == 'i':
					labels[toks[i].text] = true
				case toks[i].text != ",":
					return PromQLRefs{}, fmt.Errorf("%q in the label list of %s in %q", toks[i].text, t.text, expr)
				}
			}
			if i >= len(toks) {
				return PromQLRefs{}, fmt.Errorf("unterminated label list of %s in %q", t.text, expr)
			}
			i++
		case t.kind == 'i' && promqlKeywords[strings.ToLower(t.text)]:
			i++
		case t.kind == 'i' && (next(i).text == "(" || promqlGrouping[next(i).text] && isAggregation(t.text)):
			i++ // a function or an aggregation
		case t.kind == 'i':
			metrics[t.text] = true
			i++
		default:
			i++
		}
	}
	if depth != 0 {
		return PromQLRefs{}, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return PromQLRefs{Metrics: sortedKeys(metrics), Labels: sortedKeys(labels)}, nil
}

func isAggregation(s string) bool {
	switch s {
	case "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile":
		return true
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var (
	alertLabelRef  = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	legendLabelRef = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	grafanaVarRef  = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}?`)
)

// AlertTemplateLabels returns the label names an alert annotation's template reads
// ({{ $labels.policy }}).
func AlertTemplateLabels(text string) []string {
	m := map[string]bool{}
	for _, s := range alertLabelRef.FindAllStringSubmatch(text, -1) {
		m[s[1]] = true
	}
	return sortedKeys(m)
}

// LegendLabels returns the label names a Grafana legend format reads ({{policy}}).
func LegendLabels(legend string) []string {
	m := map[string]bool{}
	for _, s := range legendLabelRef.FindAllStringSubmatch(legend, -1) {
		m[s[1]] = true
	}
	return sortedKeys(m)
}

// GrafanaToPromQL replaces the Grafana variables of a panel query with what Prometheus accepts:
// the interval variables ($__rate_interval, $__interval, $__range) with 5m, and the dashboard's
// own variables with ".*" (they stand in regular-expression matchers, =~"$policy"; the result
// says so when one does not).
func GrafanaToPromQL(q string) (string, error) {
	var err error
	out := grafanaVarRef.ReplaceAllStringFunc(q, func(v string) string {
		name := grafanaVarRef.FindStringSubmatch(v)[1]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		}
		if !regexp.MustCompile(`=~\s*"` + regexp.QuoteMeta(v)).MatchString(q) {
			err = fmt.Errorf("variable %s stands outside a =~\"...\" matcher in %q", v, q)
		}
		return ".*"
	})
	return out, err
}
