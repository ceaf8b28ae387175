"""s3:// URLs through the engine's own client, against a real S3 API server
(moto's, in its own process on 127.0.0.1, started by each test module) that
checks every request's SigV4 signature: exact bytes for files and tar
members, credentials found as the AWS tools find them, and errors that name
the URL and S3's error code but never a credential."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

import conveyor  # noqa: E402
from conftest import run_python  # noqa: E402
from conveyor import transforms as T  # noqa: E402
from conveyor.bench.s3_server import S3Server  # noqa: E402
from conveyor.errors import ConfigError, ReadError  # noqa: E402
from conveyor.pack import pack_image_folder  # noqa: E402
from conveyor.sources import FileList, ImageFolder, RetryPolicy, TarShards  # noqa: E402

FAST_RETRY = RetryPolicy(attempts=3, initial_backoff=0.001, max_backoff=0.01)
CHAIN = [T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize((0.5,) * 3, (0.25,) * 3)]


@pytest.fixture(scope="module")
def s3(color_folder: Path, tmp_path_factory: pytest.TempPathFactory):
    """The server, holding color_folder's images under s3://data/images/ and
    its shards under s3://data/shards/."""
    shards = pack_image_folder(
        str(color_folder), str(tmp_path_factory.mktemp("shards") / "shard-%06d.tar"), shard_size=20_000
    )
    with S3Server(auth=True) as server:
        for path in ImageFolder(color_folder).paths:
            with open(path, "rb") as f:
                server.put("data", "images/" + os.path.relpath(path, color_folder), f.read())
        for shard in shards:
            with open(shard, "rb") as f:
                server.put("data", "shards/" + os.path.basename(shard), f.read())
        server.local_shards = shards  # type: ignore[attr-defined]
        yield server


def _batches(source: conveyor.sources.Source) -> list[tuple[np.ndarray, np.ndarray]]:
    with conveyor.Loader(
        source, CHAIN, batch_size=7, shuffle=True, seed=3, threads=2, io_threads=8
    ) as loader:
        return [(np.asarray(images), np.asarray(labels)) for images, labels in loader]


def _same(a: list[tuple[np.ndarray, np.ndarray]], b: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b)
    )


def test_a_file_list_of_s3_urls_gives_the_batches_of_the_local_files(s3, color_folder):
    local = ImageFolder(color_folder)
    urls = [f"s3://data/images/{os.path.relpath(p, color_folder)}" for p in local.paths]
    remote = FileList(urls, local.labels, storage_options=s3.storage_options())
    assert _same(_batches(remote), _batches(local))


def test_tar_shards_over_s3_read_the_same_samples_as_on_disk(s3):
    local = TarShards(s3.local_shards)
    pattern = f"s3://data/shards/shard-{{000000..{len(s3.local_shards) - 1:06d}}}.tar"
    remote = TarShards(pattern, storage_options=s3.storage_options())
    assert len(remote) == len(local)
    assert [remote.fields(i) for i in range(len(remote))] == [local.fields(i) for i in range(len(local))]
    assert _same(_batches(remote), _batches(local))


def test_a_wrong_secret_is_a_read_error_naming_the_url_and_never_the_secret(s3):
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
    source = FileList(
        ["s3://data/images/cat/000.jpg"], retry=FAST_RETRY, storage_options=s3.storage_options(secret=secret)
    )
    with pytest.raises(ReadError) as error:
        list(conveyor.Loader(source, [T.Resize((8, 8))], batch_size=1))
    assert str(error.value) == "s3://data/images/cat/000.jpg: HTTP 403 FORBIDDEN (SignatureDoesNotMatch)"
    for shown in (repr(source), str(vars(source)), repr(error.value.__dict__)):
        assert secret not in shown and s3.secret not in shown


def test_a_missing_key_is_named_with_s3s_error_code(s3):
    with pytest.raises(ReadError) as error:
        TarShards("s3://data/shards/none.tar", retry=FAST_RETRY, storage_options=s3.storage_options())
    assert str(error.value) == "s3://data/shards/none.tar: HTTP 404 NOT FOUND"
    source = FileList(["s3://data/images/none.jpg"], retry=FAST_RETRY, storage_options=s3.storage_options())
    with pytest.raises(ReadError) as error:
        list(conveyor.Loader(source, [T.Resize((8, 8))], batch_size=1))
    assert str(error.value) == "s3://data/images/none.jpg: HTTP 404 NOT FOUND (NoSuchKey)"


#: The AWS settings a child reads unless a test sets them: none is inherited.
_AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_STS",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


def _expect_a_signed_read(s3, env: dict[str, str]) -> None:
    """A child with ``env`` (every other AWS variable emptied) reads an
    object of ``s3`` (which checks signatures) through the engine's client."""
    result = run_python(
        """
        from conveyor.sources import FileList
        source = FileList(["s3://data/images/dog/001.jpg"])
        print(len(source._engine_source().read(0)[0]))
        """,
        env={**{name: "" for name in _AWS_VARIABLES}, **env},
    )
    assert result.returncode == 0, result.stderr
    data = s3.client().get_object(Bucket="data", Key="images/dog/001.jpg")["Body"].read()
    assert result.stdout == f"{len(data)}\n"


@pytest.mark.parametrize("where", ["environment", "credentials file", "profile", "credential_process"])
def test_credentials_and_endpoint_are_found_as_the_aws_tools_find_them(s3, tmp_path, where):
    env = {"HOME": str(tmp_path), "AWS_ENDPOINT_URL_S3": s3.endpoint_url}
    (tmp_path / ".aws").mkdir()
    if where == "environment":
        env.update(AWS_ACCESS_KEY_ID=s3.key, AWS_SECRET_ACCESS_KEY=s3.secret)
    elif where == "credential_process":
        # A credential helper as the AWS CLI runs it: words split as a shell
        # would, its JSON on standard output.
        helper = tmp_path / "my helper.py"
        keys = {"Version": 1, "AccessKeyId": s3.key, "SecretAccessKey": s3.secret}
        helper.write_text(f"import json, sys\nassert sys.argv[1] == '--team'\nprint(json.dumps({keys!r}))\n")
        command = shlex.join([sys.executable, str(helper), "--team"])
        (tmp_path / ".aws" / "config").write_text(f"[profile train]\ncredential_process = {command}\n")
        env["AWS_PROFILE"] = "train"
    else:
        section = "default" if where == "credentials file" else "train"
        (tmp_path / ".aws" / "credentials").write_text(
            f"[{section}]\naws_access_key_id = {s3.key}\naws_secret_access_key = {s3.secret}\n"
        )
        if where == "profile":
            env["AWS_PROFILE"] = "train"
    _expect_a_signed_read(s3, env)


@pytest.mark.parametrize("chain", [False, True], ids=["source-keys", "chain-of-roles"])
def test_a_profiles_role_is_assumed_at_sts_and_its_keys_read_the_bucket(s3, tmp_path, chain):
    # moto's STS checks the AssumeRole request's signature (the source
    # profile's keys: a wrong secret is "AssumeRole (HTTP 403,
    # SignatureDoesNotMatch)"), and its S3 accepts the role's keys. In a
    # chain, the reader's role is assumed with the keys of a role that may
    # only assume it, itself assumed with the base profile's keys.
    iam = s3.client("iam")
    name = "chain" if chain else "keys"  # The server lives for the module: one set of names per case.
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
    }
    trusting = json.dumps(trust)
    role = iam.create_role(RoleName=f"reader-{name}", AssumeRolePolicyDocument=trusting)["Role"]["Arn"]

    def allow(action: str, resource: str = "*") -> str:
        statement = {"Effect": "Allow", "Action": action, "Resource": resource}
        return json.dumps({"Version": "2012-10-17", "Statement": [statement]})

    iam.put_role_policy(RoleName=f"reader-{name}", PolicyName="read", PolicyDocument=allow("s3:GetObject"))
    # The source may only assume the role: a read signed with its keys is refused.
    iam.create_user(UserName=f"assumer-{name}")
    keys = iam.create_access_key(UserName=f"assumer-{name}")["AccessKey"]
    (tmp_path / ".aws").mkdir()
    key, secret = keys["AccessKeyId"], keys["SecretAccessKey"]
    (tmp_path / ".aws" / "credentials").write_text(
        f"[base]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n"
    )
    source, config, first = "base", "", role
    if chain:
        # The base keys may assume the hop only, and the hop the reader only.
        hop = iam.create_role(RoleName=f"hop-{name}", AssumeRolePolicyDocument=trusting)["Role"]["Arn"]
        assume_reader = allow("sts:AssumeRole", role)
        iam.put_role_policy(RoleName=f"hop-{name}", PolicyName="assume", PolicyDocument=assume_reader)
        source, config, first = "hop", f"[profile hop]\nrole_arn = {hop}\nsource_profile = base\n", hop
    iam.put_user_policy(
        UserName=f"assumer-{name}", PolicyName="assume", PolicyDocument=allow("sts:AssumeRole", first)
    )
    (tmp_path / ".aws" / "config").write_text(
        f"[profile reader]\nrole_arn = {role}\nsource_profile = {source}\nregion = us-east-1\n{config}"
    )
    env = {"HOME": str(tmp_path), "AWS_PROFILE": "reader", "AWS_ENDPOINT_URL": s3.endpoint_url}
    _expect_a_signed_read(s3, env)


def test_without_credentials_a_forbidden_read_says_none_were_found(s3, tmp_path):
    # moto checks signatures here, so an unsigned request is refused.
    env = {"HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "", "AWS_PROFILE": ""}
    result = run_python(
        """
        import sys
        from conveyor.errors import ReadError
        from conveyor.sources import FileList, RetryPolicy
        source = FileList(["s3://data/images/dog/001.jpg"], retry=RetryPolicy(attempts=1),
                          storage_options={"endpoint_url": sys.argv[1]})
        try:
            source._engine_source().read(0)
        except ReadError as e:
            print(e)
        """,
        s3.endpoint_url,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "s3://data/images/dog/001.jpg: HTTP 403 FORBIDDEN; the request was unsigned (credentials: none found "
        "(looked in storage_options, AWS_ACCESS_KEY_ID, ~/.aws/credentials and ~/.aws/config [default]))\n"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key": 3, "secret": "s"}, "FileList: storage_options['key'] must be a str, got int"),
        ({"key": "k"}, "FileList: storage_options: key and secret must be given together"),
        ({"anon": "perhaps"}, "FileList: storage_options: anon must be true or false, got 'perhaps'"),
        (
            {"connect_timeout": "1"},
            "FileList: storage_options['connect_timeout'] must be a number of seconds, got '1'",
        ),
        ({"read_timeout": 0.5}, "FileList: HttpStore: read_timeout must be a finite number of seconds >= 1"),
        (
            {"endpoint_url": "minio:9000"},
            "FileList: storage_options: endpoint_url must start with http:// or https://, got 'minio:9000'",
        ),
    ],
)
def test_bad_storage_options_are_config_errors_naming_the_key(options, message):
    with pytest.raises(ConfigError) as error:
        FileList(["s3://bucket/a.jpg"], storage_options=options)
    assert str(error.value) == message


def test_an_image_folder_under_an_s3_prefix_is_the_local_image_folder(s3, color_folder):
    local = ImageFolder(color_folder)
    remote = ImageFolder("s3://data/images", storage_options=s3.storage_options())
    assert remote.root == "s3://data/images/"
    assert remote.classes == local.classes and remote.labels == local.labels
    assert remote.paths == [f"s3://data/images/{os.path.relpath(p, color_folder)}" for p in local.paths]
    assert _same(_batches(remote), _batches(local))


def test_a_class_folder_under_an_s3_prefix_without_images_is_a_class_as_locally(s3, tmp_path):
    # Classes came from the images' keys alone: "b" vanished and "c" took its label.
    local = tmp_path / "tree"
    for key in ("a/1.jpg", "b/readme.txt", "c/2.jpg"):
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(b"\xff\xd8 not decoded here")
        s3.put("data", "classes/" + key, (local / key).read_bytes())
    s3.put("data", "classes/d/", b"")  # A folder marker, as the S3 console makes one.
    (local / "d").mkdir()
    options = s3.storage_options()
    with pytest.raises(ConfigError) as remote_error:
        ImageFolder("s3://data/classes/", storage_options=options)
    with pytest.raises(ConfigError) as local_error:
        ImageFolder(local)
    assert str(remote_error.value) == str(local_error.value).replace(str(local), "s3://data/classes/")
    remote = ImageFolder("s3://data/classes/", allow_empty=True, storage_options=options)
    kept = ImageFolder(local, allow_empty=True)
    assert remote.classes == kept.classes == ["a", "b", "c", "d"]
    assert remote.labels == kept.labels == [0, 2]


def test_tar_shards_under_an_s3_prefix_are_its_tar_objects_in_order(s3):
    remote = TarShards("s3://data/shards/", storage_options=s3.storage_options())
    assert remote.shards == [f"s3://data/shards/{os.path.basename(p)}" for p in s3.local_shards]
    with pytest.raises(ConfigError, match=r"^TarShards: found no \.tar objects under s3://data/images/$"):
        TarShards("s3://data/images/", storage_options=s3.storage_options())


def test_tar_shards_under_a_prefix_are_indexed_from_what_its_listing_says(s3):
    # Half the shards with their index: listed sizes spare every HEAD, and a
    # shard whose index is not listed is read without asking for one.
    shards = s3.local_shards
    for i, shard in enumerate(shards):
        for path in [shard] + ([shard + ".index.json"] if i % 2 == 0 else []):
            with open(path, "rb") as f:
                s3.put("data", "indexed/" + os.path.basename(path), f.read())
    remote = TarShards("s3://data/indexed/", storage_options=s3.storage_options())
    assert remote.shards == [f"s3://data/indexed/{os.path.basename(p)}" for p in shards]
    # One request a shard: its index, or its bytes (each under 8 MiB, one range).
    counters = remote._store.counters()
    assert counters["requests"] == len(shards)
    assert counters["bytes"] == sum(
        os.path.getsize(shard + (".index.json" if i % 2 == 0 else "")) for i, shard in enumerate(shards)
    )
    # A prefix beside a shard named alone: that one is asked its size and index.
    mixed = TarShards(
        ["s3://data/indexed/", "s3://data/shards/shard-000001.tar"], storage_options=s3.storage_options()
    )
    assert len(mixed) == len(remote) + len(TarShards(shards[1]))
    assert mixed._store.counters()["requests"] == len(shards) + 3  # HEAD, its index (404), its bytes.
    local = TarShards(shards)
    assert [remote.key(i).rsplit(":", 1)[1] for i in range(len(remote))] == [
        local.key(i).rsplit(":", 1)[1] for i in range(len(local))
    ]
    assert _same(_batches(remote), _batches(local))


def test_a_listing_of_thousands_of_keys_follows_every_page(s3):
    # S3 answers 1 000 keys per page; names with spaces, "+", "&" and
    # non-ASCII letters come back exactly (XML-escaped in the reply).
    from concurrent.futures import ThreadPoolExecutor

    names = [f"k/{i // 100:02d}/{i:04d} a+b&c é.jpg" for i in range(1005)] + ["k/notes.txt"]
    client = s3.client()
    client.create_bucket(Bucket="many")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: client.put_object(Bucket="many", Key=name, Body=b"x"), names))
    listed = FileList.from_prefix("s3://many/k", storage_options=s3.storage_options())
    assert listed.paths == [f"s3://many/{name}" for name in sorted(names[:-1])]
    assert listed.labels is None
    with pytest.raises(ConfigError, match=r"^FileList.from_prefix: found no images under s3://many/none/"):
        FileList.from_prefix("s3://many/none/", storage_options=s3.storage_options())


def test_a_listing_of_a_missing_bucket_is_a_read_error_naming_it(s3):
    with pytest.raises(ReadError) as error:
        FileList.from_prefix("s3://nobucket/x/", retry=FAST_RETRY, storage_options=s3.storage_options())
    assert str(error.value) == "s3://nobucket/x/: HTTP 404 NOT FOUND (NoSuchBucket)"


def test_http_prefixes_cannot_be_listed():
    with pytest.raises(ConfigError, match=r"^ImageFolder: http:// has no listing; list the URLs"):
        ImageFolder("http://127.0.0.1:9/train/")


def test_web_identity_is_read_by_the_engines_own_client(tmp_path):
    # EKS's web identity (IRSA) is exchanged at STS by the engine itself
    # (cpp/conveyor/io/role_credentials_test.cc checks the exchange): the
    # source reads s3:// natively, without s3fs.
    result = run_python(
        """
        from conveyor.sources import FileList
        source = FileList(["s3://bucket/a.jpg"])
        print(type(source._store).__name__)
        """,
        env={
            "AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "token"),
            "AWS_ROLE_ARN": "arn:aws:iam::1:role/trainer",
            "AWS_ACCESS_KEY_ID": "",
            "HOME": str(tmp_path),
        },
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "HttpStore\n"


def test_gs_urls_with_an_hmac_key_are_signed_for_gcss_xml_api(s3):
    # GCS's S3-compatible XML API takes SigV4 with an HMAC key; moto stands in
    # for storage.googleapis.com here (endpoint_url), checking the signatures.
    options = {"key": s3.key, "secret": s3.secret, "endpoint_url": s3.endpoint_url}
    listed = FileList.from_prefix("gs://data/images/dog/", storage_options=options)
    assert listed.paths[0] == "gs://data/images/dog/000.jpg" and len(listed) == 10
    assert type(listed._store).__name__ == "HttpStore"
    data = s3.client().get_object(Bucket="data", Key="images/dog/000.jpg")["Body"].read()
    assert listed._engine_source().read(0)[0] == data
    wrong = FileList(
        ["gs://data/images/dog/000.jpg"], retry=FAST_RETRY, storage_options={**options, "secret": "x"}
    )
    with pytest.raises(ReadError) as error:
        wrong._engine_source().read(0)
    assert str(error.value) == "gs://data/images/dog/000.jpg: HTTP 403 FORBIDDEN (SignatureDoesNotMatch)"
