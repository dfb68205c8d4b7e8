"""Cross-check for apm/gp: scikit-learn's GaussianProcessRegressor on the same data.

Reads one JSON object on stdin:
  X, y          training inputs and outputs (y already centred by the caller: prior mean 0)
  Xtest         prediction inputs
  fixed         {"signal_var", "noise_var", "length_scales", "jitter"}: hyperparameters of
                the fixed-hyperparameter check (optimizer=None)
  mine          hyperparameters fitted by apm/gp, scored with sklearn's likelihood
  bounds        {"signal_var": [lo, hi], "noise_var": [lo, hi], "length_scale": [lo, hi]}
  restarts      n_restarts_optimizer for sklearn's own fit
  seed          random_state
Writes one JSON object: mean, std (predictive, including the white noise), lml_fixed,
lml_mine (sklearn's log marginal likelihood at apm/gp's fitted hyperparameters) and
lml_opt / hyper_opt from sklearn's optimiser. normalize_y is False throughout: apm/gp does
not rescale y, and the caller passes zero-mean y to match a zero constant mean.
"""
import json
import sys

import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel


def kernel(h, bounds=None):
    b = bounds or {}
    fixed = "fixed" if bounds is None else None
    return ConstantKernel(h["signal_var"], b.get("signal_var", fixed)) * Matern(
        length_scale=np.array(h["length_scales"], dtype=float),
        length_scale_bounds=b.get("length_scale", fixed),
        nu=2.5,
    ) + WhiteKernel(h["noise_var"], b.get("noise_var", fixed))


def main():
    d = json.load(sys.stdin)
    X = np.array(d["X"], dtype=float)
    y = np.array(d["y"], dtype=float)
    Xt = np.array(d["Xtest"], dtype=float)
    out = {}

    f = d["fixed"]
    gpr = GaussianProcessRegressor(kernel(f), alpha=f["jitter"], optimizer=None, normalize_y=False)
    gpr.fit(X, y)
    mean, std = gpr.predict(Xt, return_std=True)
    out["mean"] = mean.tolist()
    out["std"] = std.tolist()
    out["lml_fixed"] = float(gpr.log_marginal_likelihood_value_)

    m = d["mine"]
    gm = GaussianProcessRegressor(kernel(m), alpha=m["jitter"], optimizer=None, normalize_y=False)
    gm.fit(X, y)
    out["lml_mine"] = float(gm.log_marginal_likelihood_value_)

    start = {"signal_var": 1.0, "noise_var": 0.1, "length_scales": [1.0] * X.shape[1]}
    go = GaussianProcessRegressor(
        kernel(start, d["bounds"]),
        alpha=f["jitter"],
        normalize_y=False,
        n_restarts_optimizer=d["restarts"],
        random_state=d["seed"],
    )
    go.fit(X, y)
    out["lml_opt"] = float(go.log_marginal_likelihood_value_)
    k = go.kernel_
    out["hyper_opt"] = {
        "signal_var": float(k.k1.k1.constant_value),
        "length_scales": np.atleast_1d(k.k1.k2.length_scale).tolist(),
        "noise_var": float(k.k2.noise_level),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
