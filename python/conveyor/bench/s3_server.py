"""A real S3 API server on 127.0.0.1 for the remote-storage tests and
``conveyor bench remote``: moto's S3 implementation (``pip install
'moto[server]'``), in its own process, stopped with the context manager,
optionally adding a fixed latency to every request.

With ``auth=True`` the server checks every request's SigV4 signature against
the keys of an IAM user it creates for the caller (moto verifies requests once
its first ``INITIAL_NO_AUTH_ACTION_COUNT`` actions, the user's set-up, are
done): a client whose signature is wrong gets 403 SignatureDoesNotMatch, as
from AWS.

    with S3Server(auth=True) as s3:
        s3.put("bucket", "train/a.jpg", data)
        FileList([f"s3://bucket/train/a.jpg"], storage_options=s3.storage_options())
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Optional

__all__ = ["S3Server"]

# The IAM calls that set up the signing user before moto starts checking
# signatures: create_user, create_access_key, put_user_policy.
_SETUP_ACTIONS = 3
_START_TIMEOUT_S = 60.0
_REGION = "us-east-1"


class S3Server:
    """moto's S3 server in a child process on 127.0.0.1 (a free port)."""

    def __init__(self, auth: bool = False, latency: float = 0.0) -> None:
        self.auth = auth
        self.latency = latency  # Seconds added before every reply (a thread per request waits it out).
        self.endpoint_url = ""
        self.key = "testing"  # moto accepts any key until it checks signatures.
        self.secret = "testing"
        self._process: Optional[subprocess.Popen[str]] = None

    def __enter__(self) -> S3Server:
        env = dict(os.environ)
        if self.auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(_SETUP_ACTIONS)
        else:
            env.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
        self._process = subprocess.Popen(
            [sys.executable, __file__, str(self.latency)], stdout=subprocess.PIPE, env=env, text=True
        )
        assert self._process.stdout is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        line = self._process.stdout.readline()
        if not line.strip().isdigit() or time.monotonic() > deadline:
            self.__exit__()
            raise RuntimeError(f"the S3 server did not start (it said {line!r})")
        self.endpoint_url = f"http://127.0.0.1:{int(line)}"
        if self.auth:
            self._make_user()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None

    @property
    def pid(self) -> Optional[int]:
        """The server process's id (None when stopped)."""
        return None if self._process is None else self._process.pid

    def client(self, service: str = "s3") -> Any:
        """A boto3 client of this server with the caller's keys."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=_REGION,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
        )

    def storage_options(self, **more: Any) -> dict[str, Any]:
        """``storage_options`` that read s3:// URLs from this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "key": self.key,
            "secret": self.secret,
            "region": _REGION,
            **more,
        }

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Stores ``data`` at ``s3://bucket/key`` (creating the bucket)."""
        s3 = self.client()
        try:
            s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        s3.put_object(Bucket=bucket, Key=key, Body=data)

    def _make_user(self) -> None:
        iam = self.client("iam")
        iam.create_user(UserName="conveyor")
        keys = iam.create_access_key(UserName="conveyor")["AccessKey"]
        # S3, and what a test needs to make a role and assume it.
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:*", "iam:*", "sts:AssumeRole"], "Resource": "*"}
            ],
        }
        iam.put_user_policy(UserName="conveyor", PolicyName="s3", PolicyDocument=json.dumps(policy))
        self.key, self.secret = keys["AccessKeyId"], keys["SecretAccessKey"]


def _serve(latency: float) -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # No line per request.
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    moto = DomainDispatcherApplication(create_backend_app)

    def app(environ: Any, start_response: Any) -> Any:
        if latency > 0:
            time.sleep(latency)
        return moto(environ, start_response)

    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    _serve(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)
