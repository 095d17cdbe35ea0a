"""Build models with TensorFlow/Keras (weights=None: nothing is downloaded) and profile their trainable
variables. Only this module imports TensorFlow, and only when called."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from commbench.core.errors import UsageError
from commbench.core.imports import import_tensorflow
from commbench.profiles.store import ITEMSIZE, Tensor, write

APPLICATIONS = {
    "resnet50": "ResNet50", "resnet152": "ResNet152", "inception_v3": "InceptionV3",
    "inception_resnet_v2": "InceptionResNetV2", "vgg16": "VGG16", "mobilenet_v2": "MobileNetV2",
}
MODELS = [*APPLICATIONS, "bert_base", "small_cnn"]


def tensorflow():
    return import_tensorflow("profiling builds the model with TensorFlow; install it with: "
                             "pip install 'commbench[tf]'")


def build(name: str):
    """A Keras model by commbench's name, by 'module.path:function', or from a SavedModel directory."""
    tf = tensorflow()
    if name in APPLICATIONS:  # logits out, as training with from_logits=True wants (softmax has no variables)
        return getattr(tf.keras.applications, APPLICATIONS[name])(weights=None, classifier_activation=None), \
            f"keras.applications.{APPLICATIONS[name]}(weights=None, classifier_activation=None)"
    if name == "bert_base":
        return bert_base(tf), "BERT-base encoder from Keras layers (12 x 768, 12 heads, 3072 FFN, vocab 30522)"
    if name == "small_cnn":
        return small_cnn(tf), "small CNN for 32x32x3 images (commbench train's default model)"
    if ":" in name:
        module, _, fn = name.partition(":")
        try:
            factory: Callable = getattr(importlib.import_module(module), fn)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UsageError(f"cannot load model factory {name!r}: {exc}") from None
        if not callable(factory):
            raise UsageError(f"{name} is a {type(factory).__name__}, not a function that builds a Keras model")
        try:
            model = factory()
        except Exception as exc:  # the user's own factory: its failure is theirs to see, in one line
            raise UsageError(f"model factory {name}() failed: {exc!r}"[:300]) from None
        if not hasattr(model, "trainable_variables"):
            raise UsageError(f"{name}() returned a {type(model).__name__}, not a Keras model (a tf.Module with "
                             "trainable_variables)")
        return model, f"{name}()"
    if Path(name).is_dir():
        return tf.saved_model.load(name), f"SavedModel {name}"
    raise UsageError(f"unknown model {name!r}; known: {', '.join(MODELS)}, or module.path:function, "
                     "or a SavedModel directory")


def small_cnn(tf):
    layers = tf.keras.layers
    return tf.keras.Sequential([
        tf.keras.Input((32, 32, 3)),
        layers.Conv2D(32, 3, activation="relu", padding="same"), layers.MaxPooling2D(),
        layers.Conv2D(64, 3, activation="relu", padding="same"), layers.MaxPooling2D(),
        layers.Conv2D(64, 3, activation="relu", padding="same"), layers.GlobalAveragePooling2D(),
        layers.Dense(128, activation="relu"), layers.Dense(10),
    ], name="small_cnn")


def bert_base(tf, layers_n: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, vocab: int = 30522,
              max_len: int = 512):
    L = tf.keras.layers
    ids = tf.keras.Input((128,), dtype="int32")
    seg = tf.keras.Input((128,), dtype="int32")
    positions = tf.keras.Input((128,), dtype="int32")  # an input, so that the layer's weights are tracked
    pos = L.Embedding(max_len, hidden, name="position_embeddings")(positions)
    x = L.Embedding(vocab, hidden, name="word_embeddings")(ids) + pos + \
        L.Embedding(2, hidden, name="token_type_embeddings")(seg)
    x = L.LayerNormalization(name="embeddings_norm")(x)
    for i in range(layers_n):
        a = L.MultiHeadAttention(heads, hidden // heads, name=f"layer{i}_attention")(x, x)
        x = L.LayerNormalization(name=f"layer{i}_attention_norm")(x + a)
        f = L.Dense(ffn, activation="gelu", name=f"layer{i}_intermediate")(x)
        f = L.Dense(hidden, name=f"layer{i}_output")(f)
        x = L.LayerNormalization(name=f"layer{i}_output_norm")(x + f)
    pooled = L.Dense(hidden, activation="tanh", name="pooler")(x[:, 0])
    return tf.keras.Model([ids, seg, positions], pooled, name="bert_base")


def profile(name: str, out: Path) -> tuple[int, int]:
    """Write the model's variables to ``out`` (trainable or not, in creation order); returns (trainable
    tensors, their parameters)."""
    tf = tensorflow()
    model, source = build(name)
    trainable = {id(v) for v in model.trainable_variables}
    tensors = []
    for v in model.variables:
        dtype = v.dtype if isinstance(v.dtype, str) else v.dtype.name
        shape = tuple(int(d) for d in v.shape)
        n = 1
        for d in shape:
            n *= d
        name_ = getattr(v, "path", None) or v.name
        tensors.append(Tensor(name_, shape, dtype, n * ITEMSIZE[dtype], id(v) in trainable))
    fixed = [t for t in tensors if not t.trainable]
    tensors_n = len(tensors) - len(fixed)
    params = sum(t.nbytes // ITEMSIZE[t.dtype] for t in tensors if t.trainable)
    meta = {"model": name if ":" not in name and not Path(name).is_dir() else Path(name).name.replace(":", "_"),
            "framework": f"tensorflow {tf.__version__}, keras {getattr(tf.keras, '__version__', '?')}",
            "parameters": str(params), "tensors": str(tensors_n),
            "non-trainable": f"{len(fixed)} tensors, {sum(t.nbytes for t in fixed)} bytes", "source": source}
    write(out, meta, tensors)
    return tensors_n, params
