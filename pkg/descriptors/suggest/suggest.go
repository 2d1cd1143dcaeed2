package suggest

import "strings"

// Closest returns the candidate nearest word by edit distance, when it is
// within a third of word's length (at least 1, at most 3 edits), or one
// that word is a prefix of; "" when none is close.
func Closest(word string, candidates []string) string {
	best, bestD := "", 0
	limit := min(max(len(word)/3, 1), 3)
	for _, c := range candidates {
		d := distance(word, c)
		if d <= limit && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best
	}
	for _, c := range candidates {
		if len(word) >= 2 && strings.HasPrefix(c, word) {
			return c
		}
	}
	return ""
}

// distance is the edit distance of a and b in bytes, a swap of two
// neighbours counting as one edit (optimal string alignment).
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
