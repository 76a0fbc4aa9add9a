package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// docFiles are the README and every page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/ has pages")
	return append([]string{filepath.Join("..", "..", "README.md")}, pages...)
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchors are a Markdown file's heading anchors as GitHub makes them (outside code blocks).
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	code := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			code = !code
		}
		if code || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		out[slug(h)] = true
	}
	return out
}

var codeSpan = regexp.MustCompile("`[^`\n]*`")

// withoutCode is Markdown without its code blocks and code spans (no links there).
func withoutCode(s string) string {
	var b strings.Builder
	code := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") {
			code = !code
			continue
		}
		if !code {
			b.WriteString(codeSpan.ReplaceAllString(l, ""))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestDocLinks: every relative link of the README and docs/ names a file of the repository, and
// its #anchor a heading of that file; the README stays a landing page of at most 250 lines.
func TestDocLinks(t *testing.T) {
	files := docFiles(t)
	checked := 0
	headings := map[string]map[string]bool{} // by file: its anchors, read once
	anchorsOf := func(path string) map[string]bool {
		if _, ok := headings[path]; !ok {
			headings[path] = anchors(t, path)
		}
		return headings[path]
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if filepath.Base(f) == "README.md" {
			require.LessOrEqual(t, strings.Count(string(b), "\n"), 250, "the README is a landing page: at most 250 lines")
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				_, err := os.Stat(dest)
				require.NoError(t, err, "%s links to %s, which does not exist", f, target)
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") {
				require.True(t, anchorsOf(dest)[anchor], "%s links to %s: %s has no heading #%s", f, target, dest, anchor)
			}
			checked++
		}
	}
	require.Greater(t, checked, 20, "links checked")
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		" Install":                             "install",
		" Proving a plan: `plan` and `verify`": "proving-a-plan-plan-and-verify",
		" Load with kubelet-like nodes: 5,000 and 65,000 (issue 27)": "load-with-kubelet-like-nodes-5000-and-65000-issue-27",
		" CalicoRRAutoscalerNoLeader":                                "calicorrautoscalernoleader",
	} {
		t.Run(in, func(t *testing.T) { require.Equal(t, want, slug(in)) })
	}
}
