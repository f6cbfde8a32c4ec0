#!/usr/bin/env python3
"""The check of cachepawl.integrations.transformers (save_cache / load_cache) on the GPU machine.

For every family asked for (the tiny seeded configs of examples/hf_hybrid_restore.py), in two
processes:

  save     open a store with the model's layout (model_layout(model)) on a disk folder,
           prefill the prompt one page at a time and call save_cache after each page
           (first_page = the pages saved before: sliding-window layers keep only their window),
           decode --decode-steps tokens greedily from the untouched cache; close the store.
  restore  a new process rebuilds the model from the same seed, reopens the store, and
           load_cache(store, model, prompt + [next token]) must reuse exactly the prompt's
           pages; the decode from the restored cache must equal the original's logits bit for
           bit, and model.generate(..., past_key_values=<a second restored cache>) must produce
           the same greedy tokens. A prompt in another namespace reuses nothing.

Usage (as examples/hf_hybrid_restore.py):
  CACHEPAWL_LIBRARY=build/libcachepawl.so PYTHONPATH=python \\
      python3 examples/hf_cache_integration_check.py [--families llama,jamba,...|all]
      [--page-size 16] [--prompt-pages 6] [--decode-steps 16] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_hybrid_restore as base  # noqa: E402  (the tiny configs, the model builder, decode)

NS = "tenant-a"


def open_store(layout: Any, folder: str) -> Any:
    import cachepawl

    return cachepawl.Store(layout, host_bytes=256 << 20, disk_dir=folder, disk_bytes=1 << 30,
                           write_policy="through", cuda_device=0)


def phase_save(family: str, work: str) -> Dict[str, Any]:
    import torch
    from cachepawl.integrations.transformers import model_layout, new_cache, save_cache

    config_dir = os.path.join(work, "config")
    base.write_config(family, config_dir)
    _, model, weights = base.build_model(config_dir)
    layout = model_layout(model, base.PAGE)
    tokens = base.prompt_tokens().tolist()
    n = base.PROMPT_PAGES * base.PAGE
    ids = torch.tensor(tokens, device="cuda").view(1, -1)
    kw = base.cache_kwarg(model)
    saved = 0
    with open_store(layout, os.path.join(work, "store")) as store:
        cache = new_cache(model)
        with torch.no_grad():
            for p in range(base.PROMPT_PAGES):
                model(input_ids=ids[:, p * base.PAGE:(p + 1) * base.PAGE], use_cache=True,
                      **{kw: cache})
                # Exactly the cache's tokens (a model without attention layers counts them so).
                saved = save_cache(store, cache, tokens[: (p + 1) * base.PAGE], model=model,
                                   namespace=NS, first_page=p)
        base.require(saved == n, f"save_cache saved {saved} tokens of {n}")
        logits, fed = base.decode(model, cache, ids[0, n], base.DECODE_STEPS)
    torch.save({"logits": logits.cpu(), "fed": fed}, os.path.join(work, "original.pt"))
    return {"weights_sha256": weights, "saved_tokens": saved}


def phase_restore(family: str, work: str, saved: Dict[str, Any]) -> Dict[str, Any]:
    import torch
    from cachepawl.integrations.transformers import load_cache, model_layout

    _, model, weights = base.build_model(os.path.join(work, "config"))
    base.require(weights == saved["weights_sha256"], "the rebuilt model's weights differ")
    tokens = base.prompt_tokens().tolist()
    n = base.PROMPT_PAGES * base.PAGE
    original = torch.load(os.path.join(work, "original.pt"))
    with open_store(model_layout(model, base.PAGE), os.path.join(work, "store")) as store:
        miss, none = load_cache(store, model, tokens[: n + 1], namespace="tenant-other")
        base.require(none == 0, f"another namespace reused {none} tokens")
        cache, reused = load_cache(store, model, tokens[: n + 1], namespace=NS)
        base.require(reused == n, f"load_cache reused {reused} tokens, want {n}")
        logits, fed = base.decode(model, cache, torch.tensor(tokens[n], device="cuda"),
                                  base.DECODE_STEPS)
        base.require(fed == original["fed"], "the restored cache fed other tokens")
        equal = torch.equal(logits.cpu(), original["logits"])
        base.require(equal, "the restored cache's logits differ from the original's: max "
                     f"{(logits.cpu().float() - original['logits'].float()).abs().max()}")
        result: Dict[str, Any] = {"reused_tokens": reused, "logits_equal": equal}
        if base.cache_kwarg(model) == "past_key_values":
            again, reused2 = load_cache(store, model, tokens[: n + 1], namespace=NS)
            base.require(reused2 == n, f"the second load_cache reused {reused2}")
            steps = min(8, base.DECODE_STEPS - 1)
            out = model.generate(input_ids=torch.tensor([tokens[: n + 1]], device="cuda"),
                                 past_key_values=again, max_new_tokens=steps, do_sample=False)
            got = out[0, n + 1:].tolist()
            base.require(got == original["fed"][1: 1 + steps],
                         f"generate from the restored cache gave {got}, the original decode "
                         f"{original['fed'][1:1 + steps]}")
            result["generate_tokens_equal"] = steps
    return result


def run_phase(phase: str, family: str, work: str) -> Dict[str, Any]:
    args = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--families", family,
            "--workdir", work, "--page-size", str(base.PAGE), "--prompt-pages",
            str(base.PROMPT_PAGES), "--decode-steps", str(base.DECODE_STEPS)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise base.CheckFailed(f"{phase} process: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default="llama,jamba,qwen3_next,deepseek_v3,minimax,gpt_oss")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--phase", choices=["save", "restore"], default=None)
    ap.add_argument("--page-size", type=int, default=base.PAGE)
    ap.add_argument("--prompt-pages", type=int, default=base.PROMPT_PAGES)
    ap.add_argument("--decode-steps", type=int, default=16)
    a = ap.parse_args()
    base.PAGE, base.PROMPT_PAGES, base.DECODE_STEPS = a.page_size, a.prompt_pages, a.decode_steps
    families: List[str] = (list(base.FAMILIES) if a.families == "all"
                           else [base.ALIASES.get(f, f) for f in a.families.split(",")])
    if a.phase:  # a child process: one family, one phase
        family, work = families[0], a.workdir
        if a.phase == "save":
            out = phase_save(family, work)
        else:
            with open(os.path.join(work, "saved.json")) as f:
                out = phase_restore(family, work, json.load(f))
        print(json.dumps(out))
        return 0
    root = a.workdir or tempfile.mkdtemp(prefix="cachepawl-hf-integration-")
    failed = 0
    for family in families:
        work = os.path.join(root, family)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        try:
            saved = run_phase("save", family, work)
            with open(os.path.join(work, "saved.json"), "w") as f:
                json.dump(saved, f)
            restored = run_phase("restore", family, work)
            print(f"{family}: OK, {restored['reused_tokens']} tokens reused, "
                  f"{base.DECODE_STEPS} decode steps bit-equal"
                  + (f", generate() {restored['generate_tokens_equal']} tokens equal"
                     if "generate_tokens_equal" in restored else ""), flush=True)
        except (base.CheckFailed, Exception) as e:  # noqa: BLE001 - reported per family
            failed += 1
            print(f"{family}: FAILED: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
