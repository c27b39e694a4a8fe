"""The reliability harness's short form: `scripts/chaos` kills the engine, freezes the broker, stops
and restarts or freezes the S3 endpoint, keeps maintenance busy, and `floe audit` with the producer's
own record decide."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from conftest import ROOT, free_port


@pytest.mark.parametrize("warehouse", ["local", "s3"])
def test_chaos_short_form_passes(warehouse, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "chaos"), "--cycles", "2", "--seed", "7",
                           "--warehouse", warehouse], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    faults = re.search(r"faults: engine kills (\d+), broker freezes (\d+), S3 restarts (\d+), S3 freezes (\d+)",
                       out)
    assert faults and int(faults[1]) == 2 and int(faults[2]) == 2, out
    assert (int(faults[3]), int(faults[4])) == ((1, 1) if warehouse == "s3" else (0, 0))
    assert "floe audit: OK" in out and "cross-check against the producer: OK" in out and "verdict PASS" in out
    assert re.search(r"maintenance runs: .*(compact|expire) ok [1-9]", out), out
    assert "chaos-secret-not-for-logs" not in out + done.stderr


def test_chaos_refuses_bad_arguments_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "chaos"), "--cycles", "0"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "--cycles >= 1" in done.stderr.strip().splitlines()[-1]


def _s3_endpoint(port: int, state) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "s3_endpoint"), str(port), str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen) -> int:
    proc.terminate()
    code = proc.wait(30)
    proc.stdout.close()
    return code


def test_the_s3_endpoint_keeps_its_buckets_across_a_restart(tmp_path):
    import boto3
    from botocore.exceptions import EndpointConnectionError

    port = free_port()
    state = tmp_path / "s3.state"
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="k", aws_secret_access_key="s")
    proc = _s3_endpoint(port, state)
    try:
        client.create_bucket(Bucket="kept")
        for i in range(3):
            client.put_object(Bucket="kept", Key=f"data/{i}", Body=f"row {i}".encode())
        client.delete_object(Bucket="kept", Key="data/1")
        assert _stop(proc) == 0
        with pytest.raises(EndpointConnectionError):  # stopped means stopped: nothing listens
            client.list_buckets()
        busy = socket.create_server(("127.0.0.1", 0))  # a port in use is refused in one line, not waited on
        refused = subprocess.run([sys.executable, str(ROOT / "scripts" / "s3_endpoint"),
                                  str(busy.getsockname()[1]), str(state)], capture_output=True, text=True, timeout=60)
        busy.close()
        assert refused.returncode == 1 and "cannot listen on 127.0.0.1:" in refused.stderr.strip().splitlines()[-1]
        proc = _s3_endpoint(port, state)
        keys = [o["Key"] for o in client.list_objects_v2(Bucket="kept")["Contents"]]
        assert keys == ["data/0", "data/2"]
        assert client.get_object(Bucket="kept", Key="data/2")["Body"].read() == b"row 2"
    finally:
        if proc.poll() is None:
            _stop(proc)
