"""The class-data archive that `make install` writes (`sluice spark-archive`) is one this JDK and Spark's classpath
map: a session whose JVM may not start without its shared classes (``-Xshare:on``) starts and runs a job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sluice.task.spark_session import CLASS_ARCHIVE

pytestmark = pytest.mark.spark


def test_a_session_maps_the_class_archive_make_install_wrote() -> None:
    assert CLASS_ARCHIVE.exists(), "make install writes it with `sluice spark-archive`"
    job = "from sluice.task.spark_session import get_or_create; print(get_or_create('local[1]').range(5).count())"
    done = subprocess.run([sys.executable, "-c", job], env={**os.environ, "JAVA_TOOL_OPTIONS": "-Xshare:on"},
                          capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout.split()[-1:]) == (0, ["5"]), done.stderr[-3000:]
