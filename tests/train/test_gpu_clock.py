"""mhar.gpu_clock: nvidia-smi's samples of the SM clock and power read while work runs
(here a fake nvidia-smi that prints a few lines and waits to be stopped), and nothing
where there is no nvidia-smi."""

import os
import time

from mhar.gpu_clock import ClockSampler


def test_clock_sampler_reads_and_summarises(tmp_path):
    args = tmp_path / "args.txt"
    fake = tmp_path / "fake-smi"
    fake.write_text(f"""#!/bin/sh
echo "$@" > {args}
echo "1980, 120.5"
echo "[N/A], [N/A]"
echo "1725, 690.2"
echo "1755, 691.0"
echo "1500, 700.0"
exec sleep 60
""")
    fake.chmod(0o755)
    with ClockSampler(gpu="GPU-1234", period_ms=50, command=str(fake)) as clocks:
        deadline = time.monotonic() + 10
        while len(clocks.samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert clocks.samples == [(1980.0, 120.5), (1725.0, 690.2), (1755.0, 691.0), (1500.0, 700.0)]
    assert clocks.summary() == {"sm_mhz": 1740.0, "sm_mhz_p10": 1500.0, "power_w": 690.6, "samples": 4}
    assert args.read_text().split() == ["-i", "GPU-1234", "--query-gpu=clocks.sm,power.draw",
                                        "--format=csv,noheader,nounits", "-lms", "50"]
    assert clocks._proc is None  # stopped


def test_clock_sampler_without_nvidia_smi(tmp_path):
    with ClockSampler(gpu="0", command=os.path.join(tmp_path, "no-such-smi")) as clocks:
        pass
    assert clocks.samples == [] and clocks.summary() == {}
