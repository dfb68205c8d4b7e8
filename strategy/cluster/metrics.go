package cluster

import "fmt"

// contingency counts co-occurrences of true and predicted labels.
func contingency(truth, pred []int) (map[[2]int]int, map[int]int, map[int]int, error) {
	if len(truth) != len(pred) {
		return nil, nil, nil, fmt.Errorf("cluster: %d true labels and %d predicted", len(truth), len(pred))
	}
	if len(truth) == 0 {
		return nil, nil, nil, fmt.Errorf("cluster: no labels")
	}
	nij := map[[2]int]int{}
	a, b := map[int]int{}, map[int]int{}
	for i := range truth {
		nij[[2]int{truth[i], pred[i]}]++
		a[truth[i]]++
		b[pred[i]]++
	}
	return nij, a, b, nil
}

// Purity returns the fraction of samples whose predicted cluster's majority true label is
// their own: Σ_clusters max_label n(label, cluster) / n.
func Purity(truth, pred []int) (float64, error) {
	nij, _, _, err := contingency(truth, pred)
	if err != nil {
		return 0, err
	}
	best := map[int]int{}
	for k, v := range nij {
		best[k[1]] = max(best[k[1]], v)
	}
	s := 0
	for _, v := range best {
		s += v
	}
	return float64(s) / float64(len(truth)), nil
}

// ARI returns the adjusted Rand index of two labelings (Hubert and Arabie): 1 for identical
// partitions, about 0 for independent ones.
func ARI(truth, pred []int) (float64, error) {
	nij, a, b, err := contingency(truth, pred)
	if err != nil {
		return 0, err
	}
	c2 := func(n int) float64 { return float64(n) * float64(n-1) / 2 }
	var sij, sa, sb float64
	for _, v := range nij {
		sij += c2(v)
	}
	for _, v := range a {
		sa += c2(v)
	}
	for _, v := range b {
		sb += c2(v)
	}
	expected := sa * sb / c2(len(truth))
	maxIdx := (sa + sb) / 2
	if maxIdx == expected {
		return 1, nil // both partitions trivial (one cluster or all singletons)
	}
	return (sij - expected) / (maxIdx - expected), nil
}
