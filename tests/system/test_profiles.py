"""Gradient-tensor profiles against Keras itself, and the payloads commands and a model's payload over
the wire (the shipped CSVs and malformed files: tests/unit/test_profiles.py)."""


import numpy as np
import pytest
from conftest import commbench, table_rows
from unit.test_profiles import REFERENCE

from commbench.core.errors import UsageError
from commbench.profiles import store


def test_resnet50_profile_equals_keras():
    tf = pytest.importorskip("tensorflow")
    model = tf.keras.applications.ResNet50(weights=None)
    keras_params = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    p = store.load("resnet50")
    assert len(p.tensors) == len(model.trainable_weights) == 214
    assert p.parameters == keras_params
    assert [t.shape for t in p.tensors] == [tuple(v.shape) for v in model.trainable_weights]


@pytest.mark.slow
def test_application_models_give_logits_as_train_s_loss_expects():
    """train's loss takes logits (from_logits=True); keras.applications end in a softmax unless told
    otherwise (Keras warned 'from_logits=True but the output ... was produced by a Softmax'). Same
    variables either way: the shipped profiles stand."""
    tf = pytest.importorskip("tensorflow")
    from commbench.profiles.models import build

    model, source = build("mobilenet_v2")
    assert model.layers[-1].activation is tf.keras.activations.linear and "classifier_activation=None" in source
    assert [tuple(v.shape) for v in model.trainable_weights] == [t.shape for t in store.load("mobilenet_v2").tensors]


@pytest.mark.slow
def test_profile_command_round_trips(tmp_path):
    pytest.importorskip("tensorflow")
    out = tmp_path / "small.csv"
    r = commbench("payloads", "profile", "--model", "small_cnn", "-o", str(out))
    assert r.code == 0, r.err
    p = store.load(str(out))
    assert len(p.tensors) == 10 and p.parameters == 65930
    assert "10 trainable tensors, 65,930 parameters" in r.out


def test_payloads_list_and_show():
    r = commbench("payloads", "list")
    assert r.code == 0
    rows = {row[0]: row for row in table_rows(r.out)}
    assert set(REFERENCE) <= set(rows) and rows["resnet50"][1] == "214"
    s = commbench("payloads", "show", "vgg16")
    assert s.code == 0 and "32 tensors, 553.43 MB" in s.out and "99.8% of bytes" in s.out


@pytest.mark.parametrize("body,line,needle", [
    ("name,shape,dtype,bytes\na,2x2,float32,16\nb,3x3,float32,35\n", 4, "35 bytes do not match shape 3x3"),
    ("name,shape,dtype,bytes\na,2xQ,float32,16\n", 3, "must be integers"),
    ("name,shape,dtype,bytes\na,2x2,complex7,16\n", 3, "unknown dtype 'complex7'"),
    ("name,shape,dtype,bytes\na,2x2,float32\n", 3, "expected 4 fields"),
    ("# model: x\nname,shape,bytes\n", 3, "expected the header"),
])
def test_malformed_profile_names_the_line(tmp_path, body, line, needle):
    f = tmp_path / "bad.csv"
    f.write_text("# model: bad\n" + body)
    with pytest.raises(UsageError, match=f"bad.csv:{line}: .*{needle}"):
        store.load(str(f))
    r = commbench("p2p-latency", "--payload", str(f))
    assert r.code == 2 and f"bad.csv:{line}:" in r.err and len(r.err.strip().splitlines()) == 1


def test_unknown_profile_lists_known():
    r = commbench("p2p-latency", "--payload", "alexnet")
    assert r.code == 2 and "unknown model or profile 'alexnet'" in r.err and "resnet50" in r.err


def test_model_payload_over_the_wire_validated():
    r = commbench("p2p-latency", "--payload", "mobilenet_v2", "-i", "3", "-x", "1", "--validate")
    assert r.code == 0, r.err
    assert "gradient tensors of mobilenet_v2: 158 buffers, 14.02 MB" in r.out
    assert table_rows(r.out)[0][-1] == "0"
    s = commbench("p2p-bandwidth", "-t", "grpc", "--payload", "skew:resnet50", "-i", "3", "-W", "4", "--validate")
    assert s.code == 0, s.err
    assert table_rows(s.out)[0][-1] == "0"


def test_tensors_per_message_splits_the_model():
    r = commbench("p2p-latency", "--payload", "resnet50", "--tensors-per-message", "64", "-i", "2", "-x", "0",
                  "--validate")
    assert r.code == 0, r.err
    rows = table_rows(r.out)
    assert [row[0].split("=")[0] for row in rows] == ["resnet50[0:64]", "resnet50[64:128]", "resnet50[128:192]",
                                                      "resnet50[192:214]"]
    sizes = [t.nbytes for t in store.load("resnet50").tensors]
    assert rows[3][0].endswith(f"={sum(sizes[192:]) / 1e6:.2f}MB") and all(row[-1] == "0" for row in rows)
    bad = commbench("p2p-latency", "--payload", "resnet50", "--tensors-per-message", "0")
    assert bad.code == 2 and "argument --tensors-per-message: must be a whole number from 1" in bad.err


@pytest.mark.slow
def test_an_installed_package_carries_the_profiles(tmp_path):
    """`pip install .` (a wheel, not the source tree) ships payloads/: --payload resnet50 works from it."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(repo)], check=True, capture_output=True, timeout=300)
    assert (target / "commbench" / "payloads" / "resnet50.csv").is_file()
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "commbench", "p2p-latency", "--payload", "resnet50", "-i", "3",
                        "-x", "1"], capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "gradient tensors of resnet50" in r.stdout
