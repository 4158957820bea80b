"""What the export checks share (deepspeed_config.py, torchtitan_config.py, megatron_config.py): a
plan per layout written by `cpt plan --out`, and the run over the matrix that fails when any layout
does."""
import json
import os
import subprocess
import sys


def plan(cpt, out, model_name, gpus, fix, global_batch, seq_len=4096, flags=()):
    """`cpt plan --out OUT` for one layout (--fix, and any other flags); plan.json's contents."""
    subprocess.run([cpt, "plan", "--model", model_name, "--gpu", "h100", "--gpus", str(gpus), "--global-batch",
                    str(global_batch), "--seq-len", str(seq_len), "--fix", fix, "--threads", "1", "--out", out,
                    *flags], check=True, stdout=subprocess.DEVNULL)
    return json.load(open(os.path.join(out, "plan.json")))


def run_matrix(layouts, check_layout):
    """check_layout(cpt, work, index, layout, failures) for each layout, with argv's CPT_BINARY and
    WORK_DIR; exit 1 with every failure printed when any."""
    cpt, work = sys.argv[1], sys.argv[2]
    failures = []
    for index, layout in enumerate(layouts):
        check_layout(cpt, work, index, layout, failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
