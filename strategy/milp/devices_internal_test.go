package milp

import "testing"

// assignDevices is exact where first-fit by size is not: classes of 3 and 3 devices hold
// two 2-device and two 1-device instances (one of each per class), not three 2-device
// instances (one per class at most), though the totals (6) would allow both.
func TestAssignDevices(t *testing.T) {
	for _, tc := range []struct {
		name  string
		free  []int
		needs []devNeed
		ok    bool
	}{
		{"one of each per class", []int{3, 3}, []devNeed{{g: 1, count: 2, elig: []int{0, 1}}, {g: 2, count: 2, elig: []int{0, 1}}}, true},
		{"fragmented", []int{3, 3}, []devNeed{{g: 2, count: 3, elig: []int{0, 1}}}, false},
		{"eligibility", []int{4, 2}, []devNeed{{g: 3, count: 1, elig: []int{0}}, {g: 2, count: 1, elig: []int{1}}, {g: 1, count: 1, elig: []int{0, 1}}}, true},
		{"eligibility too tight", []int{4, 2}, []devNeed{{g: 3, count: 1, elig: []int{0}}, {g: 2, count: 1, elig: []int{0, 1}}, {g: 1, count: 2, elig: []int{0}}}, false},
		{"nothing", []int{0}, []devNeed{{}}, true},
	} {
		as, ok := assignDevices(tc.free, tc.needs)
		if ok != tc.ok {
			t.Errorf("%s: ok = %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		used := make([]int, len(tc.free))
		for j, nd := range tc.needs {
			tot := 0
			for k, c := range as[j] {
				used[k] += c * nd.g
				tot += c
				if c > 0 && !contains(nd.elig, k) {
					t.Errorf("%s: need %d on class %d it does not accept", tc.name, j, k)
				}
			}
			if tot != nd.count {
				t.Errorf("%s: need %d got %d instances, want %d", tc.name, j, tot, nd.count)
			}
		}
		for k := range used {
			if used[k] > tc.free[k] {
				t.Errorf("%s: class %d over-committed %d/%d", tc.name, k, used[k], tc.free[k])
			}
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
