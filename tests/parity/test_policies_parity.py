"""The augmentation policies (TrivialAugmentWide, RandAugment, AutoAugment)
against torchvision 0.29's transforms.v2 on uint8 tensors: every op of every
table, at torchvision's own magnitudes, through torchvision's
`_apply_image_or_video_transform` and through conveyor's kernels (the
"augment_op" image function the policy steps run); and from_torchvision of
a v2 ImageNet recipe with TrivialAugmentWide."""

import numpy as np
import pytest
import torch
from torchvision.transforms import AutoAugmentPolicy, InterpolationMode, v2

from conftest import mean_abs_diff, to_tensor
from conveyor import _conveyor
from conveyor import transforms as T
from conveyor.transforms import from_torchvision

#: conveyor's op numbers (AugmentOp in policies.h).
OPS = [
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
    "Invert",
]
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
MARGIN = 4


@pytest.fixture(scope="module")
def image(photo):
    """A non-square crop of the photograph (the translations' magnitudes depend on the size)."""
    return np.ascontiguousarray(photo[40:241, 60:320])


def ours(image, op, magnitude, interpolation, fill):
    params = {"op": [float(OPS.index(op))], "magnitude": [magnitude], "interpolation": [interpolation]}
    params["fill"] = [float(v) for v in fill]
    return _conveyor.apply_image_function("augment_op", params, image)


def theirs(policy, image, op, magnitude, interpolation, fill):
    out = policy._apply_image_or_video_transform(
        to_tensor(image), op, magnitude, interpolation=interpolation, fill=policy._fill
    )
    return out.permute(1, 2, 0).numpy()


MODES = [InterpolationMode.NEAREST, InterpolationMode.BILINEAR]
POLICIES = [
    ("TrivialAugmentWide", lambda **kw: v2.TrivialAugmentWide(**kw), 31),
    ("RandAugment", lambda **kw: v2.RandAugment(**kw), 31),
    ("AutoAugment", lambda **kw: v2.AutoAugment(**kw), 10),
    ("AugMix", lambda **kw: v2.AugMix(**kw), 10),
]


def test_tables_have_conveyors_ops_in_order():
    # RandAugment and TrivialAugmentWide draw an index into their table: the same order as ours.
    assert list(v2.TrivialAugmentWide._AUGMENTATION_SPACE) == OPS[:14]
    assert list(v2.RandAugment._AUGMENTATION_SPACE) == OPS[:14]
    assert set(v2.AutoAugment._AUGMENTATION_SPACE) == set(OPS[1:])
    assert set(v2.AugMix._AUGMENTATION_SPACE) == set(OPS[1:14])


@pytest.mark.parametrize(("name", "make", "bins"), POLICIES, ids=[p[0] for p in POLICIES])
@pytest.mark.parametrize("mode", MODES, ids=["nearest", "bilinear"])
def test_every_op_at_torchvisions_magnitudes(image, name, make, bins, mode):
    fill = [12, 200, 77]
    policy = make(interpolation=mode, fill=fill)
    height, width = image.shape[:2]
    interpolation = 0 if mode == InterpolationMode.NEAREST else 1
    checked = 0
    for op, (magnitudes_fn, signed) in policy._AUGMENTATION_SPACE.items():
        magnitudes = magnitudes_fn(bins, height, width)
        values = [0.0] if magnitudes is None else [float(magnitudes[i]) for i in (1, bins // 2, bins - 1)]
        for magnitude in values:
            for sign in (1, -1) if signed else (1,):
                m = sign * magnitude
                got = ours(image, op, m, interpolation, fill)
                want = theirs(policy, image, op, m, mode, fill)
                assert got.shape == want.shape
                if op in GEOMETRIC and mode == InterpolationMode.BILINEAR:
                    inner = (slice(MARGIN, -MARGIN), slice(MARGIN, -MARGIN))
                    assert mean_abs_diff(got[inner], want[inner]) <= 2.0, (op, m)
                    assert mean_abs_diff(got, want) <= 2.0, (op, m)
                else:
                    # Nearest warps and the colour ops are bit-exact.
                    np.testing.assert_array_equal(got, want, err_msg=f"{name} {op} {m}")
                checked += 1
    assert checked >= 25


def test_policy_steps_accept_torchvisions_arguments():
    assert T.AutoAugment(AutoAugmentPolicy.CIFAR10).policy == "cifar10"
    converted = from_torchvision(
        v2.Compose(
            [
                v2.RandAugment(num_ops=3, magnitude=5, num_magnitude_bins=11, fill=[1, 2, 3]),
                v2.AutoAugment(AutoAugmentPolicy.SVHN, interpolation=InterpolationMode.BILINEAR),
            ]
        )
    )
    assert [t._spec() for t in converted] == [
        T.RandAugment(3, 5, 11, fill=[1, 2, 3])._spec(),
        T.AutoAugment("svhn", interpolation="bilinear")._spec(),
    ]
    augmix = from_torchvision(v2.Compose([v2.AugMix(severity=4, chain_depth=2, alpha=0.5, all_ops=False)]))
    assert [t._spec() for t in augmix] == [
        T.AugMix(4, 3, 2, 0.5, False, interpolation="bilinear")._spec(),
    ]


def test_aug_mix_with_one_chain_of_identity_weights_is_the_chain(image):
    """AugMix with torchvision's Dirichlet draws fixed to (0, 1) and (1, 0, ..):
    the output is the first chain's ops; the mixing's roundings leave it exact."""
    policy = v2.AugMix(mixture_width=1, chain_depth=1, severity=1)
    policy._sample_dirichlet = lambda p: torch.tensor([[0.0, 1.0]]) if p.shape[1] == 2 else torch.ones(1, 1)
    torch.manual_seed(0)
    out = policy(to_tensor(image)).permute(1, 2, 0).numpy()
    # One of its ops at bin 0 (severity 1): ours at the same magnitude gives one of these.
    size = image.shape[:2]
    candidates = [
        ours(image, op, 0.0 if fn(10, *size) is None else float(fn(10, *size)[0]), 1, [0])
        for op, (fn, _) in policy._AUGMENTATION_SPACE.items()
    ]
    assert any(np.array_equal(out, c) for c in candidates)


MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def test_from_torchvision_converts_the_trivial_augment_recipe():
    recipe = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomResizedCrop(224),
            v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )
    converted = from_torchvision(recipe)
    assert converted.dtype == "float32"
    native = [
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.TrivialAugmentWide(),
        T.Normalize(MEAN, STD),
    ]
    assert [repr(t) for t in converted] == [repr(t) for t in native]
    assert [t._spec() for t in converted] == [t._spec() for t in native]
