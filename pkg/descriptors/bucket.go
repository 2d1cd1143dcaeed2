package descriptors

import "sort"

// MaxBucketSteps bounds the work of one BucketEntries call: the tree nodes
// it visits, whatever the bucket and the configuration.
const MaxBucketSteps = 4096

// BucketEntries orders the key/value pairs of an RLQS bucket id (a map,
// without order) into the descriptor entries of a rule of domain: the
// order in which the domain's descriptor tree nests their keys, so that
// one configuration serves ShouldRateLimit requests and RLQS buckets
// alike. It walks the tree from the domain's root; at each level it takes
// the bucket key whose pair the level matches (exact value, then wildcard,
// then key only, as Match does), trying keys in sorted order and backing
// out of dead ends, until every pair is placed and a rule applies at the
// last one. It reports false when no order of the pairs reaches a rule
// within MaxBucketSteps visits, and for an unknown domain or an empty
// bucket.
func (c *Config) BucketEntries(domain string, bucket map[string]string) ([]Entry, bool) {
	root := c.domains[domain]
	if root == nil || len(bucket) == 0 {
		return nil, false
	}
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w := bucketWalk{bucket: bucket, keys: keys, used: make([]bool, len(keys)), out: make([]Entry, 0, len(keys))}
	if !w.walk(root) {
		return nil, false
	}
	return w.out, true
}

// bucketWalk is one BucketEntries search.
type bucketWalk struct {
	bucket map[string]string
	keys   []string
	used   []bool
	out    []Entry
	steps  int
}

// walk places the unused keys below n, depth first; it reports whether the
// placement ends on a rule with every key used.
func (w *bucketWalk) walk(n *node) bool {
	for i, k := range w.keys {
		if w.used[i] {
			continue
		}
		if w.steps++; w.steps > MaxBucketSteps {
			return false
		}
		e := Entry{Key: k, Value: w.bucket[k]}
		next := n.child(e)
		if next == nil {
			continue
		}
		w.used[i] = true
		w.out = append(w.out, e)
		if len(w.out) == len(w.keys) {
			if next.rule != nil {
				return true
			}
		} else if next.children > 0 && w.walk(next) {
			return true
		}
		w.used[i] = false
		w.out = w.out[:len(w.out)-1]
	}
	return false
}
