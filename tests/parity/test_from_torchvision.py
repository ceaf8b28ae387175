"""torchvision pipelines passed as they are: from_torchvision and
Loader(transforms=<torchvision Compose>) against conveyor's native chains
(exactly) and against torchvision's own output (within the parity tolerance)."""

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as v1
from torchvision.transforms import v2

import conveyor
from conftest import mean_abs_diff
from conveyor import transforms as T
from conveyor.sources import ImageFolder
from conveyor.transforms import from_torchvision
from conveyor.transforms.torchvision import CONVERTERS

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_recipe(tv):
    return tv.Compose(
        [tv.RandomResizedCrop(224), tv.RandomHorizontalFlip(), tv.ToTensor(), tv.Normalize(MEAN, STD)]
    )


def eval_recipe(tv):
    return tv.Compose([tv.Resize(256), tv.CenterCrop(224), tv.ToTensor(), tv.Normalize(MEAN, STD)])


def cifar_recipe(tv):
    return tv.Compose(
        [tv.RandomCrop(32, padding=4), tv.RandomHorizontalFlip(), tv.ToTensor(), tv.Normalize(MEAN, STD)]
    )


def finetune_recipe(tv):
    # What fine-tuning scripts add: rotation, colour jitter, grayscale, blur.
    return tv.Compose(
        [
            tv.RandomResizedCrop(96),
            tv.RandomRotation(10),
            tv.ColorJitter(0.4, 0.4, 0.4, 0.1),
            tv.RandomGrayscale(),
            tv.GaussianBlur(3),
            tv.ToTensor(),
            tv.Normalize(MEAN, STD),
        ]
    )


NATIVE_TRAIN = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
NATIVE_CIFAR = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
NATIVE_FINETUNE = [
    T.RandomResizedCrop(96),
    T.RandomRotation(10),
    T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    T.RandomGrayscale(),
    T.GaussianBlur(3),
    T.Normalize(MEAN, STD),
]
NATIVE_EVAL = [T.Resize(256), T.CenterCrop(224), T.Normalize(MEAN, STD)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, photo):
    """An ImageFolder of 2 classes × 4 PNG crops of the photograph, of varied sizes."""
    root = tmp_path_factory.mktemp("tv")
    for c in range(2):
        (root / f"class{c}").mkdir()
        for k in range(4):
            i = c * 4 + k
            crop = photo[i * 9 : 300 + i * 25, i * 5 : 280 + i * 30]
            Image.fromarray(np.ascontiguousarray(crop)).save(root / f"class{c}" / f"{k}.png")
    return root


def batches(folder, transforms, **kwargs):
    loader = conveyor.Loader(ImageFolder(folder), transforms, batch_size=3, seed=11, shuffle=True, **kwargs)
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.parametrize("tv", [v1, v2], ids=["v1", "v2"])
@pytest.mark.parametrize(
    ("recipe", "native"),
    [
        (train_recipe, NATIVE_TRAIN),
        (eval_recipe, NATIVE_EVAL),
        (cifar_recipe, NATIVE_CIFAR),
        (finetune_recipe, NATIVE_FINETUNE),
    ],
)
def test_converted_recipes_give_exactly_the_native_batches(folder, tv, recipe, native):
    converted = from_torchvision(recipe(tv))
    assert converted.dtype == "float32"
    assert len(converted) == len(native)
    expected = batches(folder, native)
    for got in (batches(folder, recipe(tv)), batches(folder, converted)):
        assert len(got) == len(expected) == 3
        for (a, la), (b, lb) in zip(expected, got):
            assert a.dtype == b.dtype == torch.float32
            assert torch.equal(a, b) and torch.equal(la, lb)


def test_v2_recipe_with_to_image_and_to_dtype(folder):
    to_float = v2.ToDtype(torch.float32, scale=True)
    pipeline = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomResizedCrop(224),
            v2.RandomHorizontalFlip(),
            to_float,
            v2.Normalize(MEAN, STD),
        ]
    )
    expected = batches(folder, NATIVE_TRAIN)
    for (a, _), (b, _) in zip(expected, batches(folder, pipeline)):
        assert torch.equal(a, b)
    uint8 = batches(folder, [v2.PILToTensor(), v2.Resize(256), v2.CenterCrop(224)])
    assert uint8[0][0].dtype == torch.uint8
    assert torch.equal(uint8[0][0], batches(folder, [T.Resize(256), T.CenterCrop(224)], dtype="uint8")[0][0])


def test_eval_recipe_is_within_parity_of_torchvision_itself(folder):
    loader = conveyor.Loader(ImageFolder(folder), eval_recipe(v1), batch_size=8)
    ours = next(iter(loader))[0].numpy()
    pipeline = eval_recipe(v1)
    source = ImageFolder(folder)
    theirs = np.stack([pipeline(Image.open(path).convert("RGB")).numpy() for path in source.paths])
    mean, std = np.array(MEAN)[:, None, None], np.array(STD)[:, None, None]
    # Compared on the 0-255 scale, where issue 8's tolerance is set.
    assert mean_abs_diff((ours * std + mean) * 255, (theirs * std + mean) * 255) <= 1.0


def test_an_unknown_torchvision_transform_names_its_class_and_position(folder):
    pipeline = v1.Compose(
        [v1.Resize(256), v1.Compose([v1.CenterCrop(224), v1.ElasticTransform()]), v1.ToTensor()]
    )
    expected = (
        "transforms[1][1]: ElasticTransform (torchvision.transforms.transforms.ElasticTransform) has no "
        "conveyor equivalent; wrap it as T.Lambda(obj) to run it in Python on each image, or leave it out "
        "(conveyor.transforms.torchvision.CONVERTERS lists the classes conveyor converts; docs/migrating.md "
        "maps each one)"
    )
    assert {"AutoAugment", "RandAugment", "TrivialAugmentWide", "CenterCrop"} <= set(CONVERTERS)
    with pytest.raises(conveyor.ConfigError) as info:
        from_torchvision(pipeline)
    assert str(info.value) == expected
    with pytest.raises(conveyor.ConfigError) as info:
        conveyor.Loader(ImageFolder(folder), pipeline)
    assert str(info.value) == expected


def test_unsupported_parameters_name_the_transform():
    with pytest.raises(conveyor.ConfigError) as info:
        from_torchvision(v2.Compose([v2.Resize(256, interpolation=v2.InterpolationMode.LANCZOS)]))
    assert str(info.value) == (
        "transforms[0]: torchvision Resize cannot be converted: Resize: interpolation must be one of "
        "InterpolationMode.NEAREST, InterpolationMode.BILINEAR, InterpolationMode.BICUBIC, "
        "InterpolationMode.NEAREST_EXACT (or 'nearest', 'bilinear', 'bicubic', 'nearest-exact'), "
        "got <InterpolationMode.LANCZOS: 'lanczos'> (torchvision has it for PIL images only)"
    )


def test_a_dtype_that_disagrees_with_the_pipeline_is_refused(folder):
    with pytest.raises(conveyor.ConfigError) as info:
        conveyor.Loader(ImageFolder(folder), eval_recipe(v2), dtype=torch.float16)
    assert str(info.value) == (
        "dtype='float16' disagrees with the transforms: their torchvision type conversion (ToTensor, "
        "PILToTensor, ToImage, ToDtype, ConvertImageDtype) gives 'float32'; leave dtype out, or change the "
        "conversion in the pipeline"
    )


def test_the_doctor_passes_a_dataloaders_own_sampler_on(folder):
    import torchvision

    from conveyor.doctor.rules.conveyor_loader import replacement

    dataset = torchvision.datasets.ImageFolder(str(folder), transform=eval_recipe(v2))
    text, _ = replacement(
        dataset, batch_size=2, shuffle=False, drop_last=False, sampler="WeightedRandomSampler"
    )
    lines = text.splitlines()
    assert lines[1] == (
        "# (`sampler`: your DataLoader's WeightedRandomSampler, drawn once per epoch as DataLoader does)"
    )
    assert "    sampler=sampler," in lines
    weights = [1.0] * len(dataset)

    def make():
        return torch.utils.data.WeightedRandomSampler(weights, 5, generator=torch.Generator().manual_seed(4))

    namespace: dict = {"sampler": make()}
    exec(text, namespace)
    ours = [y.tolist() for _, y in namespace["loader"]]
    theirs = [y.tolist() for _, y in torch.utils.data.DataLoader(dataset, sampler=make(), batch_size=2)]
    assert ours == theirs


def test_the_doctor_replaces_a_real_torchvision_image_folder(folder):
    import torchvision

    from conveyor.doctor.rules.conveyor_loader import replacement

    dataset = torchvision.datasets.ImageFolder(str(folder), transform=eval_recipe(v2))
    text, trial = replacement(dataset, batch_size=3, shuffle=False, drop_last=True)
    assert (trial.paths, trial.labels, trial.batch_size, trial.dtype) == (
        [path for path, _ in dataset.samples],
        [label for _, label in dataset.samples],
        3,
        "float32",
    )
    assert text.splitlines()[4:] == [
        f"    conveyor.sources.ImageFolder({str(folder)!r}),",
        "    [",
        "        T.Resize(size=256, antialias=True),",
        "        T.CenterCrop(size=(224, 224)),",
        "        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),",
        "    ],",
        "    batch_size=3,",
        "    drop_last=True,",
        ")",
    ]
    namespace: dict = {}
    exec(text, namespace)
    ours = [(x.clone(), y.clone()) for x, y in namespace["loader"]]
    expected = conveyor.Loader(ImageFolder(folder), NATIVE_EVAL, batch_size=3, drop_last=True)
    for (a, la), (b, lb) in zip(ours, expected, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)
