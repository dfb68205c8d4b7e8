#!/usr/bin/python3
"""Offline clustering baselines for `trident bench adapt` (paper Table 4).

Reads JSON from stdin: {"streams": [{"name": str, "k": int, "log": [bool...],
"x": [[float...]...]}], "eps": float, "min_samples": int} and writes JSON to stdout:
{"sklearn": version, "results": [{"name": str, "kmeans": [labels], "dbscan": [labels]}]}.

Features flagged in "log" are log1p-transformed, then every feature is standardised
(StandardScaler), the same transform the online clusterer uses. K-means gets the true cluster
count (k) and n_init=10, random_state=0; DBSCAN gets eps and min_samples (noise = label -1).
"""
import json
import sys

import numpy as np
import sklearn
from sklearn.cluster import DBSCAN, KMeans
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
        db = DBSCAN(eps=req["eps"], min_samples=req["min_samples"]).fit_predict(z)
        out["results"].append({"name": s["name"], "kmeans": km.tolist(), "dbscan": db.tolist()})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
