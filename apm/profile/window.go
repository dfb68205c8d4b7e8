package profile

// Window fills cur.FeatureMean from cur.FeatureTotals: for each total, the mean over the
// interval since prev (ΔSum/ΔCount). After a restart (a total went down) the mean is taken
// since the restart; when nothing was counted in the interval the previous window's mean is
// kept; without prev (first scrape) the mean is over the instance's lifetime. A feature with
// no count yet stays absent. prev may be nil.
func Window(prev *Metrics, cur *Metrics) {
	if len(cur.FeatureTotals) == 0 {
		return
	}
	if cur.FeatureMean == nil {
		cur.FeatureMean = map[string]float64{}
	}
	for name, t := range cur.FeatureTotals {
		lifetime := func() {
			if t.Count > 0 {
				cur.FeatureMean[name] = t.Sum / t.Count
			}
		}
		if prev == nil || cur.Restarted {
			lifetime()
			continue
		}
		pt, ok := prev.FeatureTotals[name]
		if !ok {
			lifetime()
			continue
		}
		ds, dc := t.Sum-pt.Sum, t.Count-pt.Count
		switch {
		case ds < 0 || dc < 0: // reset
			lifetime()
		case dc > 0:
			cur.FeatureMean[name] = ds / dc
		default:
			if v, ok := prev.FeatureMean[name]; ok {
				cur.FeatureMean[name] = v
			} else {
				lifetime()
			}
		}
	}
}

// Restarted reports whether cur is a scrape of a restarted instance: its process start time
// changed (when exported), or a counter went down. Counters of a restarted server start
// again from zero, so no interval may be measured between prev and cur.
func Restarted(prev, cur Metrics) bool {
	if prev.StartTime != 0 && cur.StartTime != 0 && prev.StartTime != cur.StartTime {
		return true
	}
	counters := [][2]float64{
		{prev.RecordsIn, cur.RecordsIn}, {prev.RecordsOut, cur.RecordsOut},
		{prev.BusySeconds, cur.BusySeconds}, {prev.UsefulSeconds, cur.UsefulSeconds},
		{prev.OutputBlocked, cur.OutputBlocked}, {prev.OOMRestarts, cur.OOMRestarts},
	}
	for _, c := range counters {
		if c[1] < c[0] {
			return true
		}
	}
	for name, t := range cur.FeatureTotals {
		if pt, ok := prev.FeatureTotals[name]; ok && (t.Sum < pt.Sum || t.Count < pt.Count) {
			return true
		}
	}
	return false
}
