import re

from labrun import assert_page_is_clean, notebook_module

SHOTS = {
    "01_script": "%mgpu_run train_ddp.py",
    "02_accelerate": "%mgpu_pull acc_losses",
    "03_lightning": "%mgpu_pull lightning_losses",
}

pytestmark, run = notebook_module("08_your_own_code.ipynb", SHOTS, timeout_s=300)

STEP = re.compile(r"step (\d): loss ([0-9.]+)")


def test_the_script_and_both_frameworks_give_the_single_process_losses(run, lab):
    text = run.text
    env = text["%%mgpu\nimport os"]
    assert "[rank 0] {'RANK': '0', 'LOCAL_RANK': '0', 'WORLD_SIZE': '2'" in env
    assert "[rank 1] {'RANK': '1', 'LOCAL_RANK': '1', 'WORLD_SIZE': '2'" in env
    script = text["%mgpu_run train_ddp.py --steps 5"]
    ranks_steps = STEP.findall(script)
    one = STEP.findall(text["import torch\n\ndef one_process"])
    assert len(one) == 5 and ranks_steps == one  # rank 0's printed mean losses, to 6 decimals
    assert "[rank 0] step 4: loss" in script and "[rank 1] step" not in script
    # the script's init/destroy said once, as an ordinary line: nothing of %mgpu_run's on stderr (pink)
    assert script.count("mgpu: init_process_group() joined the session's group (gloo, 2 ranks)") == 1
    stderr = [o for o in run.outputs("%mgpu_run train_ddp.py") if o.get("name") == "stderr"]
    assert stderr == [], stderr
    assert "Traceback" not in script
    accelerate = text["%%mgpu\nfrom accelerate import Accelerator"]
    assert "[rank 0] DistributedType.MULTI_CPU 2 processes" in accelerate and "[rank 1]" not in accelerate
    for prefix, name in (("%mgpu_pull acc_losses", "accelerate"), ("%mgpu_pull lightning_losses", "lightning")):
        compared = text[prefix]
        got = re.search(rf"{name}: +(\[.*\])", compared).group(1)
        want = re.search(r"one process: +(\[.*\])", compared).group(1)
        assert got == want and len(got.split(",")) == 5, compared
        assert "equal: True" in compared
    lightning = text["%%mgpu\nimport logging, warnings"]
    assert "[rank 0] DDPStrategy TorchElasticEnvironment" in lightning
    assert "interactive" not in lightning and "Traceback" not in lightning
    after = text["%%mgpu\nt = torch.tensor([float(rank + 1)])"]
    assert "[rank 0] all_reduce: 3.0" in after and "[rank 1] all_reduce: 3.0" in after
    assert "engines stopped" in text["import os\nos.remove"]
    assert not (lab["root"] / "notebooks" / "train_ddp.py").exists()  # the notebook cleans up after itself


def test_page_is_clean(run):
    assert_page_is_clean(run)
