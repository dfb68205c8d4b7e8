package opcontract_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trident-sched/trident/apm/opcontract"
)

// An operator reads the config the planner chose from its group meta, registers the
// contract's metrics with its pipeline and operator as constant labels, and serves them on
// the port its group names in trident_metrics_port.
func Example_operator() {
	// Nomad gives a task its group meta as NOMAD_META_<key>; an operator passes os.Getenv.
	// Here: an instance of operator "ocr" that the planner placed on node gpu1 with the
	// config of epoch 3.
	env := map[string]string{
		"NOMAD_GROUP_NAME":                             "ocr@gpu1.g3",
		opcontract.MetaEnv(opcontract.MetaOperator):    "ocr",
		opcontract.MetaEnv(opcontract.MetaConfig):      "max_num_seqs=16,block_size=16",
		opcontract.MetaEnv(opcontract.MetaConfigEpoch): "3",
	}
	inst, err := opcontract.ReadInstance(func(k string) string { return env[k] })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Printf("operator %s, epoch %d, max_num_seqs %s\n", inst.Operator, inst.Epoch, inst.Config["max_num_seqs"])

	labels := prometheus.Labels{opcontract.LabelPipeline: "pdf", opcontract.LabelOperator: inst.Operator}
	recordsIn := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: opcontract.RecordsIn, Help: "Records consumed.", ConstLabels: labels,
	}, []string{opcontract.LabelEpoch})
	queue := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: opcontract.QueueLength, Help: "Records waiting.", ConstLabels: labels,
	})
	epoch := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: opcontract.ConfigEpoch, Help: "Epoch of the running config.", ConstLabels: labels,
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(recordsIn, queue, epoch)
	// (The other metrics of the contract are registered the same way.)

	epoch.Set(float64(inst.Epoch))
	recordsIn.WithLabelValues(strconv.FormatUint(inst.Epoch, 10)).Add(42)
	queue.Set(7)

	// An operator serves this handler on /metrics; here one scrape is printed.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		if !strings.HasPrefix(line, "#") {
			fmt.Println(line)
		}
	}
	// Output:
	// operator ocr, epoch 3, max_num_seqs 16
	// trident_config_epoch{operator="ocr",pipeline="pdf"} 3
	// trident_queue_length{operator="ocr",pipeline="pdf"} 7
	// trident_records_in_total{epoch="3",operator="ocr",pipeline="pdf"} 42
}

// The planner renders each parameter of an operator's config as its own group meta key,
// which a job file interpolates into the server's command line.
func ExampleParamMeta() {
	meta, err := opcontract.ParamMeta("max_num_seqs=64,block_size=16")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	key := opcontract.ParamMetaKey("max_num_seqs")
	fmt.Printf("%s = %q\n", key, meta[key])
	fmt.Printf("args = [\"--max-num-seqs\", \"${%s}\"]\n", opcontract.MetaEnv(key))
	// Output:
	// trident_param_max_num_seqs = "64"
	// args = ["--max-num-seqs", "${NOMAD_META_trident_param_max_num_seqs}"]
}
