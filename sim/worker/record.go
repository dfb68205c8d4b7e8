package worker

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
)

// Record is one unit of work flowing between operators. Its ID is idempotent: outputs derive
// their IDs deterministically from the input ID, so a redelivered input yields the same output
// IDs and the sink can deduplicate.
type Record struct {
	ID       string             `json:"id"`
	Regime   int                `json:"regime"`          // workload regime (document type, video category)
	Kind     string             `json:"kind"`            // doc, text, table, formula, video, clip, caption
	Features map[string]float64 `json:"f,omitempty"`     // workload features (pages, tokens, height, ...)
	Bytes    float64            `json:"bytes,omitempty"` // simulated payload size
}

// ChildID is the ID of the i-th output of a fan-out operator applied to the record parent.
func ChildID(parent, tag string, i int) string {
	return fmt.Sprintf("%s/%s%03d", parent, tag, i)
}

// MsgID is the JetStream Msg-Id of a record published on a subject. Deduplication is per
// stream, and a record keeps its ID through 1:1 operators, so the subject is part of the key.
func MsgID(subject, recordID string) string { return subject + "|" + recordID }

// F returns the named feature, or 0 when the record lacks it.
func (r Record) F(name string) float64 { return r.Features[name] }

// rngFor returns a generator seeded only by the record ID, so every derivation from a record
// (its children, its filter decision) is reproducible on redelivery and in the verifier.
func rngFor(id string, salt string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(salt))
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// uniform draws from [lo, hi).
func uniform(r *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }

func encodeRecord(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode record %s: %w", r.ID, err)
	}
	return b, nil
}

func decodeRecord(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode record: %w", err)
	}
	if r.ID == "" {
		return r, fmt.Errorf("decode record: empty id")
	}
	return r, nil
}
