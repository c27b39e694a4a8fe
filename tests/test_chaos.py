"""The reliability harness's short form: `scripts/chaos` kills the engine, freezes the broker, stops
and restarts or freezes the S3 endpoint (SeaweedFS), keeps maintenance busy, and `floe audit` with the producer's
own record decide."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ROOT


# The S3 warehouse only: its run does everything the local one does (engine kills, broker freezes, maintenance
# under both) and S3 restarts and freezes besides; a local warehouse through kills is test_exactly_once's, through
# kills with compaction and expiry test_stages'. `scripts/chaos --warehouse local` stays for a person to run.
# One cycle: each fault once (a kill, a broker freeze, an S3 restart and an S3 freeze, at random moments); a
# second cycle repeated them, at a restart's 20 s and more (repeated kills are test_exactly_once's).
@pytest.mark.parametrize("warehouse", ["s3"])
def test_chaos_short_form_passes(warehouse, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "chaos"), "--cycles", "1", "--seed", "7",
                           "--warehouse", warehouse], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    faults = re.search(r"faults: engine kills (\d+), broker freezes (\d+), S3 restarts (\d+), S3 freezes (\d+)",
                       out)
    assert faults and int(faults[1]) == 1 and int(faults[2]) == 1, out
    assert (int(faults[3]), int(faults[4])) == ((1, 1) if warehouse == "s3" else (0, 0))
    assert "floe audit: OK" in out and "cross-check against the producer: OK" in out and "verdict PASS" in out
    assert re.search(r"maintenance runs: .*(compact|expire) ok [1-9]", out), out
    assert "chaos-secret-not-for-logs" not in out + done.stderr


def test_chaos_refuses_bad_arguments_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "chaos"), "--cycles", "0"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "--cycles >= 1" in done.stderr.strip().splitlines()[-1]


def test_the_s3_endpoint_keeps_its_objects_across_a_kill_and_a_restart(seaweed):
    """What the S3 outages of `scripts/chaos` rely on: SeaweedFS killed refuses connections, and started
    again on the same ports it has every object it acknowledged."""
    from botocore.exceptions import EndpointConnectionError

    client = seaweed.client()
    bucket = seaweed.new_bucket()
    for i in range(3):
        client.put_object(Bucket=bucket, Key=f"data/{i}", Body=f"row {i}".encode())
    client.delete_object(Bucket=bucket, Key="data/1")
    with seaweed.down():
        with pytest.raises(EndpointConnectionError):  # killed means killed: nothing listens
            client.list_buckets()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["data/0", "data/2"]
    assert client.get_object(Bucket=bucket, Key="data/2")["Body"].read() == b"row 2"
