#!/usr/bin/python3
"""Offline clustering baselines for `trident bench adapt` (paper Table 4).

Reads JSON from stdin: {"streams": [{"name": str, "k": int, "log": [bool...],
"x": [[float...]...], "y": [true labels]}], "eps": [float...], "min_samples": int} and writes
JSON to stdout: {"sklearn": version, "results": [{"name": str, "kmeans": [labels],
"dbscan": [labels], "dbscan_eps": float}]}.

Features flagged in "log" are log1p-transformed, then every feature is standardised
(StandardScaler). K-means gets the true cluster count (k) and n_init=10, random_state=0.
DBSCAN (min_samples, noise = label -1) is run for every eps of the list and the eps with the
best ARI against the true labels is kept: an upper bound for DBSCAN, which in practice has
no labels to tune eps with.
"""
import json
import sys

import numpy as np
import sklearn
from sklearn.cluster import DBSCAN, KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler


def main():
    req = json.load(sys.stdin)
    out = {"sklearn": sklearn.__version__, "results": []}
    for s in req["streams"]:
        x = np.asarray(s["x"], dtype=float)
        for d, lg in enumerate(s["log"]):
            if lg:
                x[:, d] = np.log1p(x[:, d])
        z = StandardScaler().fit_transform(x)
        km = KMeans(n_clusters=s["k"], n_init=10, random_state=0).fit_predict(z)
        best = None
        for eps in req["eps"]:
            db = DBSCAN(eps=eps, min_samples=req["min_samples"]).fit_predict(z)
            ari = adjusted_rand_score(s["y"], db)
            if best is None or ari > best[0]:
                best = (ari, eps, db)
        out["results"].append({"name": s["name"], "kmeans": km.tolist(),
                               "dbscan": best[2].tolist(), "dbscan_eps": best[1]})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
