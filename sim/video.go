package sim

import "math"

// Video attributes (Attrs indexes of the video pipeline).
const (
	VidDuration = iota // seconds
	VidHeight          // pixels (720 .. 2160)
	VidScenesPerMin
	VidTextFrac // fraction of clips with burned-in text
	VidMBps     // encoded bitrate in MB/s
	vidNAttrs
)

func videoSampler(durLo, durHi, hLo, hHi, scenes float64) func(r RandSource) Attrs {
	return func(r RandSource) Attrs {
		a := make(Attrs, vidNAttrs)
		a[VidDuration] = durLo + (durHi-durLo)*r.Float64()
		a[VidHeight] = math.Exp(math.Log(hLo) + (math.Log(hHi)-math.Log(hLo))*r.Float64())
		a[VidScenesPerMin] = math.Max(1, lognorm(r, scenes, 0.3))
		a[VidTextFrac] = clamp(0.25+0.1*r.NormFloat64(), 0, 0.8)
		a[VidMBps] = 0.6 * math.Pow(a[VidHeight]/720, 1.6)
		return a
	}
}

// megapixels of one frame.
func vidMP(a Attrs) float64 { return a[VidHeight] * a[VidHeight] * 16 / 9 / 1e6 }

// clipsPer returns clips per video (scene-based splitting, at least one).
func clipsPer(a Attrs) float64 { return math.Max(1, a[VidDuration]/60*a[VidScenesPerMin]) }

// clipSeconds is the mean clip length.
func clipSeconds(a Attrs) float64 { return a[VidDuration] / clipsPer(a) }

// framesPerClip samples frames at 2 fps, 4 to 32 per clip.
func framesPerClip(a Attrs) float64 { return clamp(2*clipSeconds(a), 4, 32) }

// frameMB is the raw RGB size of the sampled frames of one clip.
func frameMB(a Attrs) float64 { return framesPerClip(a) * vidMP(a) * 3 }

// VideoPipeline returns the 9-operator video curation pipeline of the paper (§8.1):
// scene-based splitting, aesthetic filtering (CLIP), OCR-based text filtering (CRAFT) and
// LLM captioning (Qwen2.5-VL-7B), each of the three on 1 NPU; the other six are CPU-bound.
// The dataset holds short-form clips then long-form videos. scale multiplies the number
// of videos.
func VideoPipeline(scale float64) *Pipeline {
	cpu := func(c, m float64) Resources { return Resources{CPU: c, MemGB: m} }
	npu := Resources{CPU: 8, MemGB: 64, Acc: 1}
	vfeat := []string{"duration_s", "height_px"}
	vf := func(a Attrs) []float64 { return []float64{a[VidDuration], a[VidHeight]} }
	videoMB := func(a Attrs) float64 { return a[VidDuration] * a[VidMBps] }
	clipMB := func(a Attrs) float64 { return clipSeconds(a) * a[VidMBps] }
	ops := []OpSpec{
		{Name: "read_video", Need: cpu(2, 4), ColdStartS: 8, StopS: 2, QueueCap: 400, FeatureNames: vfeat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.02 + videoMB(a)/200 }, Out: videoMB, Feat: vf}},
		{Name: "scene_detect", Need: cpu(8, 16), ColdStartS: 10, StopS: 2, QueueCap: 400, FeatureNames: vfeat,
			// Decoding at ~2400 megapixel-frames/s on 8 cores at 30 fps analysis rate.
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.3 + a[VidDuration]*30*vidMP(a)/1800 }, Out: videoMB, Feat: vf}},
		{Name: "split_clips", Need: cpu(8, 16), ColdStartS: 10, StopS: 2, QueueCap: 400, FeatureNames: vfeat,
			// Per-video ffmpeg setup and keyframe indexing, a cut per clip, partial re-encode.
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.8 + 0.25*clipsPer(a) + a[VidDuration]*30*vidMP(a)/6000 },
				Amp: clipsPer, Out: clipMB, Feat: vf}},
		{Name: "frame_extract", Need: cpu(4, 16), ColdStartS: 8, StopS: 2, QueueCap: 4000, FeatureNames: vfeat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.3 + framesPerClip(a)*vidMP(a)*0.02 },
				Out: frameMB, Feat: vf}},
		{Name: "clip_aesthetic", Need: npu, Async: true, MaxInFlight: 256, InFlightParam: "batch_size", ColdStartS: 30, StopS: 3, QueueCap: 4000,
			Space: VisionSpace(16), FeatureNames: vfeat,
			Model: &VisionModel{
				PerItem:    func(a Attrs) float64 { return 0.004 * framesPerClip(a) * math.Sqrt(vidMP(a)) },
				Overhead:   0.05,
				MemPerItem: func(a Attrs) float64 { return 0.02 * framesPerClip(a) },
				WeightsGB:  3, CV: 0.2,
				Amp: func(Attrs) float64 { return 0.7 }, Out: frameMB, Feat: vf}},
		{Name: "craft_text", Need: npu, Async: true, MaxInFlight: 256, InFlightParam: "batch_size", ColdStartS: 30, StopS: 3, QueueCap: 4000,
			Space: VisionSpace(8), FeatureNames: vfeat,
			Model: &VisionModel{
				PerItem:    func(a Attrs) float64 { return 0.008 * framesPerClip(a) * vidMP(a) },
				Overhead:   0.06,
				MemPerItem: func(a Attrs) float64 { return 0.02 * framesPerClip(a) * math.Min(vidMP(a), 2.1) },
				WeightsGB:  2, CV: 0.25,
				Amp: func(a Attrs) float64 { return 1 - 0.8*a[VidTextFrac] }, Out: frameMB, Feat: vf}},
		{Name: "caption", Need: npu, Async: true, MaxInFlight: 4096, ColdStartS: 90, StopS: 5, QueueCap: 4000,
			Space: LLMSpace(64, 8192), FeatureNames: []string{"in_tokens", "in_tokens_sd", "out_tokens", "out_tokens_sd"},
			Model: &LLMModel{
				Tokens: func(a Attrs) (float64, float64, float64) {
					// Visual tokens grow with resolution up to the max_pixels cap (dynamic
					// resolution, 28x28 patches, downscaled): ~90 tokens per 720p frame, 8 frames.
					vis := math.Min(framesPerClip(a), 8) * 90 * math.Min(math.Sqrt(vidMP(a)/0.92), 1.5)
					return vis + 120, 200, 0.35
				},
				T0: 0.035, T1: 0.0009, P1: 0.00022, P0: 0.3, DeviceGB: 64,
				WeightsGB: 16, KVGBPerTok: 5.5e-5, ActGBPerTok: 1.2e-3,
				Out: func(Attrs) float64 { return 0.005 },
			}},
		{Name: "caption_filter", Need: cpu(1, 2), ColdStartS: 6, StopS: 1, QueueCap: 20000, FeatureNames: vfeat,
			Model: &CPUModel{Cost: func(Attrs) float64 { return 0.01 }, Amp: func(Attrs) float64 { return 0.9 }, Out: clipMB, Feat: vf}},
		{Name: "write_clips", Need: cpu(2, 4), ColdStartS: 6, StopS: 1, QueueCap: 20000, FeatureNames: vfeat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.01 + clipMB(a)/300 }, Out: func(Attrs) float64 { return 0.001 }, Feat: vf}},
	}
	return &Pipeline{
		Name:      "video",
		Ops:       ops,
		AttrNames: []string{"duration_s", "height_px", "scenes_per_min", "text_frac", "mb_per_s"},
		Regimes: []Regime{
			{Name: "short_form", Records: 180000 * scale, Sample: videoSampler(10, 30, 720, 720, 6)},
			{Name: "long_form", Records: 4300 * scale, Sample: videoSampler(300, 600, 1080, 2160, 5)},
		},
		BatchDocs: 4,
	}
}
