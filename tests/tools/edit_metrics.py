"""Recomputes EVALUATE EDITS' metrics from the token log-probabilities it saved, by the
formulas of the tools whose definitions it follows (written out here independently):

- ROME, experiments/py/eval_utils_counterfact.py (`test_batch_prediction`): a prompt's
  value for a target is the mean over the target's tokens of -log_softmax at the token's
  teacher-forced position. experiments/summarize.py: per record,
  `rewrite/paraphrase_success = mean(x["target_true"] > x["target_new"])`,
  `neighborhood_success = mean(x["target_true"] < x["target_new"])`, and the `_diff`
  magnitudes `mean(exp(-new) - exp(-true))` (neighbourhood: `exp(-true) - exp(-new)`);
  a run's value is the mean over records.
- EasyEdit, easyeditor/evaluate/evaluate_utils.py (`test_prediction_acc`):
  `mean(equal(argmax, label))` over the target's positions; locality compares the
  post-edit top-1 tokens with the pre-edit ones, `mean(equal(pre, post))`; a record's
  value is the mean over its prompts of a kind.

Usage: python edit_metrics.py scores.json  → JSON {"scope/stage": {metric: value}}.
"""

import json
import sys

import numpy as np


def nll(t):
    return float(np.sum(-np.asarray(t["logprobs"], dtype=np.float64)) / len(t["logprobs"]))


def rome_pair(p):
    return {"target_new": nll(p["target_new"]), "target_true": nll(p["target_true"])}


def acc(ans, label):
    return float(np.mean(np.equal(ans, label)))


def record_metrics(now, before):
    out = {}
    for key, prompts in [("efficacy", [now["rewrite"]]), ("paraphrase", now["paraphrase"])]:
        if prompts:
            xs = [rome_pair(p) for p in prompts]
            out[key] = float(np.mean([x["target_true"] > x["target_new"] for x in xs]))
            out[key + "_diff"] = float(
                np.mean([np.exp(-x["target_new"]) - np.exp(-x["target_true"]) for x in xs])
            )
            out[key + "_acc"] = float(
                np.mean([acc(p["target_new"]["argmax"], p["target_new"]["tokens"]) for p in prompts])
            )
    if now["neighbourhood"]:
        xs = [rome_pair(p) for p in now["neighbourhood"]]
        out["neighbourhood"] = float(np.mean([x["target_true"] < x["target_new"] for x in xs]))
        out["neighbourhood_diff"] = float(
            np.mean([np.exp(-x["target_true"]) - np.exp(-x["target_new"]) for x in xs])
        )
        out["locality_acc"] = float(
            np.mean(
                [
                    acc(post["target_true"]["argmax"], pre["target_true"]["argmax"])
                    for post, pre in zip(now["neighbourhood"], before["neighbourhood"])
                ]
            )
        )
    return out


def main():
    doc = json.load(open(sys.argv[1]))
    facts = doc["facts"]
    scopes = {"all": facts}
    batches = {f["batch"] for f in facts}
    if len(batches) > 1:
        scopes["first_batch"] = [f for f in facts if f["batch"] == 0]
    result = {}
    for scope, members in scopes.items():
        for stage in ["before", "after_batch", "final"]:
            per = [record_metrics(f[stage], f["before"]) for f in members]
            keys = sorted({k for m in per for k in m})
            result[f"{scope}/{stage}"] = {
                k: float(np.mean([m[k] for m in per if k in m])) for k in keys
            }
    result["kl"] = float(np.mean([u["kl"] for u in doc["unrelated"]]))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
