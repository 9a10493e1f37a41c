"""Operator-owned paths and secrets, as pure rules and on a real file system: the checkpoint
subpath rule, the keys a pipeline may not set, the Spark masters it may name, the removal
that never leaves the checkpoint root, the redaction of secret-looking keys and of secrets in
the values of other keys, the worker's environment and the spec file's mode."""

from __future__ import annotations

import os
import stat

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratus.api.errors import InvalidConfError
from stratus.api.locations import LocationPolicy, subpath_problem
from stratus.api.pipeline_conf import env_entries, validate_pipeline_conf
from stratus.api.records import PendingUpdate, PipelineRecord, PipelineStatus
from stratus.api.redaction import (
    MAX_CACHED_CHARS,
    REDACTED,
    LineRedactor,
    holds_marker,
    is_secret_key,
    redact_conf,
    redact_record,
    redact_text,
    restore_redacted,
)
from stratus.checkpoints import checkpoint_location, remove_checkpoints
from stratus.config import config_from_mapping
from stratus.errors import CheckpointLocationError, ConfigError
from stratus.files import write_atomically
from stratus.supervisor.worker_env import worker_environment
from stratus.supervisor.worker_process import WorkerPaths
from tests.harness.supervisor_fakes import assignment

BAD_SUBPATHS = {
    "absolute": ("/etc", "relative"),
    "dot-dot": ("../..", "'..'"),
    "dot-dot inside": ("a/../../b", "'..'"),
    "scheme": ("hdfs://nn/x", "scheme"),
    "file scheme": ("file:/tmp/x", "scheme"),
    "NUL": ("a\x00b", "NUL"),
    "backslash": ("a\\..\\b", "backslash"),
    "over-long": ("a" * 256, "at most 255"),
    "empty part": ("a//b", "empty"),
    "odd character": ("a b", "only letters"),
    "not text": (7, "string"),
}


@pytest.mark.parametrize(("value", "rule"), BAD_SUBPATHS.values(), ids=BAD_SUBPATHS.keys())
def test_a_checkpoint_subpath_that_could_leave_the_root_is_refused_naming_the_rule(value, rule):
    problem = subpath_problem(value)
    assert problem is not None and rule in problem
    with pytest.raises(InvalidConfError) as raised:
        validate_pipeline_conf({"pipeline.checkpoint.subpath": value})
    assert "pipeline.checkpoint.subpath" in str(raised.value)
    assert raised.value.status == 422


@pytest.mark.parametrize("value", ["v2", "orders/v2", "a.b_c-d/e", "x" * 255])
def test_a_relative_checkpoint_subpath_is_accepted(value):
    assert subpath_problem(value) is None
    assert validate_pipeline_conf({"pipeline.checkpoint.subpath": value})


@pytest.mark.parametrize(
    "key",
    [
        "pipeline.checkpoint.root",
        "spark.sql.warehouse.dir",
        "spark.jars",
        "spark.eventLog.dir",
        "spark.hadoop.hive.metastore.uris",
    ],
)
def test_a_key_that_names_the_operators_paths_or_hosts_is_refused(key):
    with pytest.raises(InvalidConfError, match=key.replace(".", r"\.")) as raised:
        validate_pipeline_conf({key: "hdfs://elsewhere/x"})
    assert "operator" in str(raised.value)


@pytest.mark.parametrize(
    "key",
    [
        "spark.executor.extraJavaOptions",
        "spark.kubernetes.driver.javaOptions",  # a key Spark has not named yet: its family's
        "spark.executor.userClassPathFirst",
        "spark.yarn.jars",
        "spark.sql.hive.metastore.jars",
        "spark.driver.extraLibraryPath",
        "spark.yarn.appMasterEnv.PYTHONPATH",
        "spark.kubernetes.driverEnv.JAVA_TOOL_OPTIONS",
        "spark.python.worker.module",
        "spark.r.command",
        "spark.extraListeners",
        "spark.sql.queryExecutionListeners",
        "spark.sql.streaming.streamingQueryListeners",
        "spark.executor.plugins",
        "spark.executor.resource.gpu.discoveryScript",
        "spark.sql.redaction.string.regex",
        "spark.yarn.dist.pyFiles",
        "spark.yarn.dist.archives",
        "spark.kubernetes.container.image",
        "spark.kubernetes.executor.podTemplateFile",
    ],
)
def test_every_key_of_a_jvm_or_interpreter_family_is_the_operators(key):
    with pytest.raises(InvalidConfError, match=key.replace(".", r"\.")) as raised:
        validate_pipeline_conf({key: "x"})
    assert "spark-defaults.conf" in str(raised.value)


@pytest.mark.parametrize(
    "key",
    [
        "spark.executor.memory",
        "spark.sql.shuffle.partitions",
        "spark.python.worker.reuse",
        "spark.sql.catalog.lake",
        "spark.ui.enabled",
        "spark.sql.streaming.stateStore.providerClass",
        "spark.sql.files.maxPartitionBytes",
        "spark.kubernetes.container.image.pullPolicy",
    ],
)
def test_spark_tuning_keys_outside_those_families_pass(key):
    assert validate_pipeline_conf({key: "1"})


def test_a_spark_master_must_be_local_or_one_the_operator_allows():
    policy = LocationPolicy(spark_masters=frozenset({"yarn", "spark://m1:7077"}))
    for fine in ("local", "local[2]", "local[*]", "local[2,3]", "yarn", "spark://m1:7077"):
        policy.check({"spark.master": fine, "pipeline.spark.master": fine})
    for key in ("spark.master", "pipeline.spark.master", "spark.remote"):
        with pytest.raises(InvalidConfError, match=rf"{key}: 'spark://evil:7077'"):
            policy.check({key: "spark://evil:7077"})
    with pytest.raises(InvalidConfError):
        LocationPolicy().check({"spark.master": "local[2]x"})


def test_a_refused_spark_master_is_named_without_the_passwords_of_the_masters_urls():
    policy = LocationPolicy(spark_masters=frozenset({"spark://ops:0p5-pw@m1:7077"}))
    with pytest.raises(InvalidConfError) as raised:
        policy.check({"spark.master": "spark://me:m3-pw@evil:7077"})
    message = str(raised.value)
    assert "'spark://me:***@evil:7077'" in message and "(spark://ops:***@m1:7077)" in message
    assert "0p5-pw" not in message and "m3-pw" not in message


def test_pipeline_env_entries_are_validated_and_become_text():
    conf = {"pipeline.env.REGION": "eu", "pipeline.env.DEBUG": True, "pipeline.env._N1": 3}
    assert env_entries(validate_pipeline_conf(conf)) == {
        "REGION": "eu",
        "DEBUG": "true",
        "_N1": "3",
    }
    for bad in ("pipeline.env.1X", "pipeline.env.A-B", "pipeline.env.", "pipeline.env.A=B"):
        with pytest.raises(InvalidConfError, match="environment variable"):
            validate_pipeline_conf({bad: "x"})
    with pytest.raises(InvalidConfError, match="NUL") as raised:
        validate_pipeline_conf({"pipeline.env.DB_PASSWORD": "hunter2\x00"})
    assert "hunter2" not in str(raised.value)


def test_the_checkpoint_root_must_use_an_allowed_scheme():
    conf = config_from_mapping({"pipeline.checkpoint.root": "s3a://bucket/ck"})
    assert conf.checkpoint_root() == "s3a://bucket/ck"
    with pytest.raises(ConfigError, match=r"pipeline\.checkpoint\.schemes"):
        config_from_mapping(
            {"pipeline.checkpoint.root": "s3a://bucket/ck", "pipeline.checkpoint.schemes": ["hdfs"]}
        )
    with pytest.raises(ConfigError, match="'ftp'"):
        config_from_mapping({"pipeline.checkpoint.root": "ftp://host/ck"})


def test_the_location_is_the_pipelines_directory_under_the_root_plus_its_subpath():
    assert checkpoint_location("/ck/", {}, "etl") == "/ck/etl"
    assert checkpoint_location("s3a://b/ck", {"pipeline.checkpoint.subpath": "v2"}, "etl") == (
        "s3a://b/ck/etl/v2"
    )
    with pytest.raises(CheckpointLocationError, match="etl"):
        checkpoint_location("/ck", {"pipeline.checkpoint.subpath": "../other"}, "etl")


# ---------------------------------------------------------------- removal on a file system


def test_the_removal_deletes_the_pipelines_directory_but_not_what_a_link_inside_points_to(
    tmp_path,
):
    root, outside = tmp_path / "ck", tmp_path / "outside"
    (root / "etl" / "q").mkdir(parents=True)
    (root / "etl" / "q" / "offsets").write_text("1")
    (root / "other").mkdir()
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    (root / "etl" / "q" / "link").symlink_to(outside)
    (root / "etl" / "file-link").symlink_to(outside / "precious")

    assert remove_checkpoints(str(root), "etl") is True

    assert not os.path.lexists(root / "etl")
    assert (outside / "precious").read_text() == "keep me"
    assert (root / "other").is_dir()
    assert remove_checkpoints(str(root), "etl") is False  # nothing left to delete


def test_a_pipeline_directory_that_links_out_of_the_root_is_not_deleted(tmp_path):
    root, outside = tmp_path / "ck", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    (root / "etl").symlink_to(outside)

    with pytest.raises(CheckpointLocationError, match="not inside the checkpoint root"):
        remove_checkpoints(str(root), "etl")

    assert (outside / "precious").read_text() == "keep me"


def test_a_root_behind_a_link_is_resolved_before_the_containment_check(tmp_path):
    real = tmp_path / "real"
    (real / "etl").mkdir(parents=True)
    (tmp_path / "root-link").symlink_to(real)
    assert remove_checkpoints(f"file://{tmp_path / 'root-link'}", "etl") is True
    assert not (real / "etl").exists() and real.is_dir()


def test_a_removal_on_a_remote_store_deletes_the_pipelines_directory_alone():
    """fsspec's in-memory store stands for HDFS or S3: no links, paths checked as text."""
    fs = fsspec.filesystem("memory")
    fs.pipe({"/ck-remote/etl/q/0": b"1", "/ck-remote/etl-2/q/0": b"2"})
    try:
        assert remove_checkpoints("memory://ck-remote", "etl") is True
        assert not fs.exists("/ck-remote/etl")
        assert fs.cat("/ck-remote/etl-2/q/0") == b"2"
        assert remove_checkpoints("memory://ck-remote", "etl") is False
    finally:
        fs.rm("/ck-remote", recursive=True)


def test_a_removal_refuses_a_name_that_is_not_a_pipeline_name(tmp_path):
    with pytest.raises(Exception, match="invalid pipeline name"):
        remove_checkpoints(str(tmp_path), "..")


# ---------------------------------------------------------------- secrets


SECRET_KEYS = [
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net",
    "pipeline.env.DB_PASSWORD",
    "pipeline.env.API_KEY",
    "pipeline.env.GITHUB_TOKEN",
    "spark.myApp.accessKey",
    "spark.authenticate.secret",
    "spark.ssl.keyStorePassword",
    "spark.kerberos.keytab",
    "spark.datasource.credentials",
    "spark.sql.catalog.x.oauth2.token",
    "pipeline.env.AZURE_SAS",
    "spark.myapp.blob.sig",
]
PLAIN_KEYS = [
    "spark.sql.shuffle.partitions",
    "spark.master",
    "spark.ssl.keyStore",
    "spark.monkey.business",
    "pipeline.checkpoint.subpath",
    "pipeline.env.REGION",
    "spark.stratus.example.output",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_secret_looking_key_is_redacted(key):
    assert is_secret_key(key)
    assert redact_conf({key: "s3cr3t", "spark.x": 1}) == {key: REDACTED, "spark.x": 1}


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_a_plain_key_is_shown(key):
    assert not is_secret_key(key)


def test_a_records_conf_is_redacted_and_the_original_kept():
    original = assignment(conf={"pipeline.env.DB_PASSWORD": "hunter2", "spark.x": 1})
    shown = redact_record(original)
    assert shown.conf == {"pipeline.env.DB_PASSWORD": REDACTED, "spark.x": 1}
    assert original.conf["pipeline.env.DB_PASSWORD"] == "hunter2"
    assert "hunter2" not in shown.model_dump_json()


FREE_TEXT = {
    "a conf value of the pipeline": ("login with hunter2-pw failed", "login with *** failed"),
    "a secret key's pair": ("env DB_PASSWORD=abc123 set", "env DB_PASSWORD=*** set"),
    "a JSON pair": ('{"api_token": "t-9", "n": 1}', '{"api_token": "***", "n": 1}'),
    "a Python repr": ("{'spark.my.secret': 'zz9'}", "{'spark.my.secret': '***'}"),
    "a colon pair": ("aws_secret_access_key: AKIAXX", "aws_secret_access_key: ***"),
    "a bearer token": ("Authorization: Bearer abc.def-1", "Authorization: Bearer ***"),
    "a URL password": ("jdbc:postgresql://u:pw9@db/x", "jdbc:postgresql://u:***@db/x"),
    "a query password after an innocent parameter": (
        "cannot open jdbc:postgresql://db/x?user=u&password=pw-7 now",
        "cannot open jdbc:postgresql://db/x?user=u&password=*** now",
    ),
    "a query password in a URL": ("GET https://h/x?password=pw-7", "GET https://h/x?password=***"),
    "a SAS signature": ("blob at ...net/c?sv=2022&sig=Zm9v%2B", "blob at ...net/c?sv=2022&sig=***"),
    "a JAAS password": (
        'PlainLoginModule required username="u" password="pw-7";',
        'PlainLoginModule required username="u" password="***";',
    ),
    "a secret pair after an innocent one's colon": ("error: password=pw-7", "error: password=***"),
    "a JVM property": ("java -Ddb.password=pw-7 Main", "java -Ddb.password=*** Main"),
    "a URL token as user": ("clone https://ghp_x9@github.com/o", "clone https://***@github.com/o"),
    "a quote left open": ('cut short: {"password": "pw-7', 'cut short: {"password": "***'),
    "a plain pair stays": ("spark.sql.shuffle.partitions=3", "spark.sql.shuffle.partitions=3"),
    "a plain query stays": ("see https://h/x?user=u&ssl=true", "see https://h/x?user=u&ssl=true"),
    "a plain URL stays": (
        "see https://spark.apache.org:443/x",
        "see https://spark.apache.org:443/x",
    ),
}


@pytest.mark.parametrize(("text", "shown"), FREE_TEXT.values(), ids=FREE_TEXT.keys())
def test_free_text_is_redacted_by_class(text, shown):
    assert redact_text(text, {"pipeline.env.DB_PASSWORD": "hunter2-pw", "spark.x": "failed"}) == (
        shown
    )


def test_a_records_reason_is_redacted_against_its_own_conf():
    record = PipelineRecord(
        name="p",
        status=PipelineStatus.FAILED,
        digest="d" * 64,
        size_bytes=1,
        conf={"spark.my.secret": "s3cr3t-x"},
        submitted=0,
        updated=0,
        epoch=1,
        reason="its worker printed s3cr3t-x",
    )
    assert redact_record(record).reason == "its worker printed ***"


def test_a_staged_updates_conf_is_redacted_as_the_records():
    staged = PendingUpdate(
        digest="e" * 64,
        size_bytes=1,
        conf={"spark.my.secret": "n3w-s3cr3t", "spark.x": 2},
        requested=0,
    )
    record = PipelineRecord(
        name="p",
        status=PipelineStatus.ACTIVE,
        digest="d" * 64,
        size_bytes=1,
        conf={"spark.my.secret": "s3cr3t-x"},
        submitted=0,
        updated=0,
        epoch=1,
        update=staged,
        reason="staging n3w-s3cr3t",
    )
    shown = redact_record(record)
    assert shown.update is not None
    assert shown.update.conf == {"spark.my.secret": REDACTED, "spark.x": 2}
    assert shown.reason == "staging ***"
    assert "n3w-s3cr3t" not in shown.model_dump_json()
    assert record.update is staged and staged.conf["spark.my.secret"] == "n3w-s3cr3t"


def test_the_marker_sent_back_keeps_the_current_value_or_is_refused_naming_the_key():
    current = {"spark.my.secret": "s3cr3t-x"}
    sent = {"spark.my.secret": REDACTED, "spark.label": REDACTED}
    assert restore_redacted(sent, current) == {"spark.my.secret": "s3cr3t-x", "spark.label": "***"}
    with pytest.raises(InvalidConfError, match=r"'spark\.other\.password'"):
        restore_redacted({"spark.other.password": REDACTED}, current)


# An innocent key whose value holds a secret: (value, what stratus shows of it, the secret).
SECRET_IN_VALUE = {
    "a JDBC URL's query": (
        "jdbc:postgresql://db/x?user=u&password=S3cr3t-jdbc&ssl=true",
        "jdbc:postgresql://db/x?user=u&password=***&ssl=true",
        "S3cr3t-jdbc",
    ),
    "a MongoDB URI": (
        "mongodb+srv://app:S3cr3t-mongo@h1,h2/db?authSource=admin",
        "mongodb+srv://app:***@h1,h2/db?authSource=admin",
        "S3cr3t-mongo",
    ),
    "a Kafka JAAS config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="app" password="S3cr3t-jaas";',
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="app" password="***";',
        "S3cr3t-jaas",
    ),
    "an Azure SAS URL": (
        "https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=r&sig=S3cr3t%2Bsas%3D",
        "https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=r&sig=***",
        "S3cr3t%2Bsas%3D",
    ),
    "an Azure connection string": (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=S3cr3t+key==;"
        "EndpointSuffix=core.windows.net",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=***;"
        "EndpointSuffix=core.windows.net",
        "S3cr3t+key==",
    ),
    "a URL's userinfo": (
        "https://app:S3cr3t-url@api.example/v1",
        "https://app:***@api.example/v1",
        "S3cr3t-url",
    ),
    "a SQL Server JDBC URL": (
        "jdbc:sqlserver://db:1433;databaseName=x;user=app;password=S3cr3t-mssql;",
        "jdbc:sqlserver://db:1433;databaseName=x;user=app;password=***;",
        "S3cr3t-mssql",
    ),
    "an Oracle JDBC URL": (
        "jdbc:oracle:thin:app/S3cr3t-ora@//db:1521/svc",
        "jdbc:oracle:thin:app/***@//db:1521/svc",
        "S3cr3t-ora",
    ),
    "an HTTP header": ("Bearer S3cr3t-bearer.x", "Bearer ***", "S3cr3t-bearer.x"),
    "an AWS presigned URL": (
        "https://b.s3.amazonaws.com/k?X-Amz-Date=20260101&X-Amz-Signature=S3cr3t-sig",
        "https://b.s3.amazonaws.com/k?X-Amz-Date=20260101&X-Amz-Signature=***",
        "S3cr3t-sig",
    ),
}
INNOCENT_KEY = "spark.myapp.source"


@pytest.mark.parametrize(
    ("value", "shown", "secret"), SECRET_IN_VALUE.values(), ids=SECRET_IN_VALUE.keys()
)
def test_a_secret_in_an_innocent_keys_value_is_redacted_and_the_rest_shown(value, shown, secret):
    assert not is_secret_key(INNOCENT_KEY)
    assert redact_conf({INNOCENT_KEY: value, "spark.x": 1}) == {INNOCENT_KEY: shown, "spark.x": 1}
    assert redact_text(f"failed on {value} now") == f"failed on {shown} now"
    # the secret alone, as a crashing pipeline may print it, is looked for in free text
    assert redact_text(f"login with {secret} refused", {INNOCENT_KEY: value}) == (
        "login with *** refused"
    )


def test_a_long_value_and_a_long_key_are_redacted_as_short_ones():
    """Short keys and values keep their redaction in memory; longer ones are scanned each
    time, by the same rules."""
    path = "x" * MAX_CACHED_CHARS
    long_value = f"jdbc:postgresql://db/{path}?user=u&password=S3cr3t-jdbc"
    long_key = f"spark.{'y' * MAX_CACHED_CHARS}.password"
    assert redact_conf({INNOCENT_KEY: long_value, long_key: "pw"}) == {
        INNOCENT_KEY: f"jdbc:postgresql://db/{path}?user=u&password=***",
        long_key: REDACTED,
    }


@pytest.mark.parametrize("stored", [v[0] for v in SECRET_IN_VALUE.values()], ids=SECRET_IN_VALUE)
def test_the_redacted_form_of_a_value_sent_back_keeps_the_stored_value(stored):
    current = {INNOCENT_KEY: stored, "spark.db.password": "pw-9"}
    sent = {**redact_conf(current), "spark.sql.shuffle.partitions": 4}
    assert sent[INNOCENT_KEY] != stored
    assert restore_redacted(sent, current) == {**current, "spark.sql.shuffle.partitions": 4}


# Pieces of the forms of secrets, and of what surrounds them, for values made at random.
PIECES = st.sampled_from(
    [
        "password=", "pwd=", "sig=", "user=", "&", "?", ";", ":", "@", "/", "https://",
        "jdbc:oracle:thin:", '"', "'", " ", ",", "\n", "Bearer ", "-D", "key", "=", "*", "S3",
    ]
)  # fmt: skip


@settings(deadline=None, max_examples=500)
@given(st.lists(PIECES, max_size=12).map("".join))
def test_any_value_sent_back_as_shown_keeps_the_stored_value(stored):
    """Whatever the value, what the API shows of it, sent back, is the stored value again;
    refused only when the stored value itself holds the marker in place of a secret."""
    current = {INNOCENT_KEY: stored}
    try:
        assert restore_redacted(redact_conf(current), current) == current
    except InvalidConfError:
        assert holds_marker(stored)


def test_a_value_with_the_marker_that_is_not_the_stored_ones_redaction_is_refused():
    stored = "jdbc:postgresql://db/x?user=u&password=S3cr3t-jdbc"
    changed = {INNOCENT_KEY: "jdbc:postgresql://db2/x?user=u&password=***"}  # another host
    with pytest.raises(InvalidConfError, match=r"'spark\.myapp\.source' holds '\*\*\*' in place"):
        restore_redacted(changed, {INNOCENT_KEY: stored})
    with pytest.raises(InvalidConfError, match=r"'spark\.myapp\.source'"):  # nothing to keep
        restore_redacted({INNOCENT_KEY: "mongodb://app:***@h/db"}, {})
    # a new value with its real secret, and a marker where no secret is, are values as given
    fresh = {INNOCENT_KEY: "jdbc:postgresql://db2/x?password=n3w", "spark.label": "a *** b"}
    assert restore_redacted(fresh, {INNOCENT_KEY: stored}) == fresh


def test_a_logs_lines_are_redacted_of_the_secrets_in_the_confs_values():
    redactor = LineRedactor({INNOCENT_KEY: "mongodb://app:S3cr3t-mongo@h/db"})
    out = redactor.feed(b"auth failed for S3cr3t-mongo at mongodb://app:S3cr3t-mongo@h/db\n")
    assert out == b"auth failed for *** at mongodb://app:***@h/db\n"


# ---------------------------------------------------------------- worker environment, files


def test_the_worker_environment_is_the_allow_list_plus_the_pipelines_entries():
    parent = {
        "PATH": "/bin",
        "HOME": "/home/s",
        "LC_ALL": "C.UTF-8",
        "JAVA_HOME": "/jdk",
        "SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/var/cache/spark.jsa",
        "STRATUS_TOKEN": "supervisor-secret",
        "AWS_SECRET_ACCESS_KEY": "cloud-secret",
        "KRB5CCNAME": "/tmp/krb",
    }
    conf = {"pipeline.env.REGION": "eu", "pipeline.env.PATH": "/opt/bin", "spark.x": 1}
    env = worker_environment(parent, frozenset({"KRB5CCNAME"}), conf)
    assert env == {
        "PATH": "/opt/bin",  # the pipeline's own entry wins
        "HOME": "/home/s",
        "LC_ALL": "C.UTF-8",
        "JAVA_HOME": "/jdk",
        "SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/var/cache/spark.jsa",  # the driver's JVM
        "KRB5CCNAME": "/tmp/krb",  # the operator's supervisor.worker.env
        "REGION": "eu",
        "PYTHONUNBUFFERED": "1",
    }


def test_a_workers_directory_is_made_private_even_if_it_existed(tmp_path):
    paths = WorkerPaths.of(tmp_path, "etl")
    paths.directory.mkdir(parents=True, mode=0o755)
    paths.directory.chmod(0o755)
    paths.make_private()
    assert stat.S_IMODE(paths.directory.stat().st_mode) == 0o700


def test_a_spec_file_is_written_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text("old")
    path.chmod(0o644)
    write_atomically(path, b'{"x": 1}')
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == b'{"x": 1}'
