use ::image::codecs::jpeg::JpegEncoder;
use ::image::codecs::png::PngEncoder;
use ::image::{ExtendedColorType, ImageEncoder};
use accel::tensors::push_bytes_element;
use accel::Accelerator;

use super::*;
use crate::config;
use crate::{Engines, Model};

/// An image model's config.toml: `extra` lines under `[image]`, the output's type and
/// dims.
fn config_text(extra: &str, output: &str, dims: &str) -> String {
    format!(
        "backend = \"image\"\nmax_batch_size = 4\n[image]\n{extra}\n\
         [[input]]\nname = \"INPUT\"\ndata_type = \"TYPE_STRING\"\ndims = [1]\n\
         [[output]]\nname = \"OUTPUT\"\ndata_type = \"{output}\"\ndims = {dims}\n"
    )
}

fn model(text: &str) -> Model {
    let c = config::parse("pre", text).unwrap();
    Model::new("pre", 1, 300, &[], text.as_bytes(), c, &Engines::default()).unwrap()
}

fn png(width: u32, height: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    let mut raw = Vec::new();
    for y in 0..height {
        for x in 0..width {
            raw.extend_from_slice(&pixel(x, y));
        }
    }
    let mut out = Vec::new();
    PngEncoder::new(&mut out)
        .write_image(&raw, width, height, ExtendedColorType::Rgb8)
        .unwrap();
    out
}

/// `images` as one call's payload: each a BYTES element.
fn payload(images: &[&[u8]]) -> Vec<u8> {
    let mut p = Vec::new();
    for i in images {
        push_bytes_element(i, &mut p);
    }
    p
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn run(m: &Model, input: &[u8]) -> Result<Vec<u8>, CallError> {
    let mut out = Vec::new();
    m.run(&[0; accel::PARAMS_LEN], input, &mut out)?;
    let mut from_session = Vec::new();
    m.session()
        .unwrap()
        .run(input, &mut from_session)
        .expect("the session runs as the model");
    assert_eq!(out, from_session);
    Ok(out)
}

#[test]
fn a_png_becomes_the_scaled_tensor_in_nchw_or_nhwc() {
    let red = png(40, 30, |_, _| [255, 0, 51]);
    let nchw = model(&config_text(
        "scaling = \"INCEPTION\"",
        "TYPE_FP32",
        "[3, 4, 5]",
    ));
    let out = floats(&run(&nchw, &payload(&[&red])).unwrap());
    assert_eq!(out.len(), 3 * 4 * 5);
    let want = [1.0, -1.0, 51.0 / 127.5 - 1.0];
    for (i, v) in out.iter().enumerate() {
        assert!((v - want[i / 20]).abs() < 1e-6, "value {i}: {v}");
    }
    let nhwc = model(&config_text(
        "scaling = \"VGG\"\nformat = \"FORMAT_NHWC\"",
        "TYPE_FP32",
        "[4, 5, 3]",
    ));
    let out = floats(&run(&nhwc, &payload(&[&red])).unwrap());
    for (i, v) in out.iter().enumerate() {
        let want = [255.0 - 123.0, -117.0, 51.0 - 104.0][i % 3];
        assert!((v - want).abs() < 1e-6, "value {i}: {v}");
    }
}

#[test]
fn a_batch_of_a_png_and_a_jpeg_is_resized_each_in_uint8_or_grey() {
    // Left half black, right half white: the resize keeps the halves.
    let halves = |x: u32, _| if x < 32 { [0; 3] } else { [255; 3] };
    let p = png(64, 16, halves);
    let mut raw = Vec::new();
    for y in 0..16 {
        for x in 0..64 {
            raw.extend_from_slice(&halves(x, y));
        }
    }
    let mut jpeg = Vec::new();
    JpegEncoder::new_with_quality(&mut jpeg, 95)
        .write_image(&raw, 64, 16, ExtendedColorType::Rgb8)
        .unwrap();
    let m = model(&config_text("", "TYPE_UINT8", "[3, 2, 8]"));
    let out = run(&m, &payload(&[&p, &jpeg])).unwrap();
    assert_eq!(out.len(), 2 * 3 * 2 * 8);
    for (k, item) in out.chunks(48).enumerate() {
        for row in item.chunks(8) {
            assert!(row[..3].iter().all(|&v| v < 16), "image {k}: {row:?}");
            assert!(row[5..].iter().all(|&v| v > 239), "image {k}: {row:?}");
        }
    }
    let grey = model(&config_text("", "TYPE_FP32", "[1, 2, 8]"));
    let out = floats(&run(&grey, &payload(&[&p])).unwrap());
    assert_eq!(out.len(), 16);
    assert!(out[0] < 16.0 && out[7] > 239.0, "{out:?}");
}

/// CRC-32 (IEEE) of `data`, as a PNG chunk's.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A valid PNG whose header declares `width` × `height` (its data is a 1 × 1 image's).
fn png_declaring(width: u32, height: u32) -> Vec<u8> {
    let mut p = png(1, 1, |_, _| [1, 2, 3]);
    // The signature (8), the IHDR chunk's length (4); its type and 13 bytes of data
    // follow, then its CRC over type and data.
    assert_eq!(&p[12..16], b"IHDR");
    p[16..20].copy_from_slice(&width.to_be_bytes());
    p[20..24].copy_from_slice(&height.to_be_bytes());
    let crc = crc32(&p[12..29]);
    p[29..33].copy_from_slice(&crc.to_be_bytes());
    p
}

#[test]
fn an_image_over_the_pixel_budget_is_refused_before_it_is_decoded() {
    let m = model(&config_text("pixels_max = 10000", "TYPE_FP32", "[3, 4, 4]"));
    let e = run(&m, &payload(&[&png_declaring(100_000, 100_000)])).unwrap_err();
    assert!(matches!(e, CallError::BadRequest(_)), "{e:?}");
    let e = e.to_string();
    assert!(
        e.starts_with("image 0: it is too large to decode")
            && e.contains("budget of 10000 pixels (image.pixels_max)"),
        "{e}"
    );
    // A larger budget than the allocation limit lets through: the header's check.
    let e = run(&m, &payload(&[&png_declaring(101, 100)])).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("image 0: it declares 101 × 100 pixels, more than this model's budget"),
        "{e}"
    );
    // Within the budget by the header, the same trick fails in the decoder, cleanly.
    let e = run(&m, &payload(&[&png_declaring(100, 100)])).unwrap_err();
    assert!(e.to_string().starts_with("image 0: "), "{e}");
    // At the budget, a real image decodes.
    run(&m, &payload(&[&png(100, 100, |_, _| [9; 3])])).unwrap();
}

#[test]
fn what_does_not_decode_is_the_calls_error_naming_the_image() {
    let m = model(&config_text("", "TYPE_FP32", "[3, 4, 4]"));
    let good = png(8, 8, |_, _| [1; 3]);
    let cases: [(&[u8], &str); 4] = [
        (b"not an image at all", "image 1: not a PNG or JPEG image"),
        (
            b"GIF89a\x01\x00\x01\x00",
            "image 1: Gif images are not decoded here",
        ),
        (&good[..40], "image 1: "),
        (b"", "image 1: not a PNG or JPEG image"),
    ];
    for (bad, want) in cases {
        let e = run(&m, &payload(&[&good, bad])).unwrap_err();
        assert!(matches!(e, CallError::BadRequest(_)), "{e:?}");
        assert!(e.to_string().starts_with(want), "{want}: {e}");
    }
    // A BYTES element cut short is the payload's error.
    let mut cut = payload(&[&good]);
    cut.truncate(cut.len() - 1);
    assert!(run(&m, &cut).is_err());
}

#[test]
fn the_config_is_checked_naming_the_field() {
    let err = |text: &str| config::parse("pre", text).unwrap_err();
    let ok = config::parse("pre", &config_text("", "TYPE_FP32", "[3, 224, 224]")).unwrap();
    let p = ok.image.unwrap();
    assert_eq!((p.channels, p.height, p.width), (3, 224, 224));
    assert_eq!(
        (p.scaling, p.channels_first, p.pixels_max),
        (Scaling::None, true, PIXELS_DEFAULT)
    );
    for (extra, output, dims, want) in [
        (
            "scaling = \"NEW\"",
            "TYPE_FP32",
            "[3, 4, 4]",
            "image.scaling",
        ),
        (
            "format = \"FORMAT_NONE\"",
            "TYPE_FP32",
            "[3, 4, 4]",
            "image.format",
        ),
        (
            "pixels_max = 0",
            "TYPE_FP32",
            "[3, 4, 4]",
            "image.pixels_max",
        ),
        (
            "pixels_max = 67108865",
            "TYPE_FP32",
            "[3, 4, 4]",
            "image.pixels_max",
        ),
        (
            "pixels_max = 15",
            "TYPE_FP32",
            "[3, 4, 4]",
            "at most image.pixels_max",
        ),
        ("", "TYPE_FP32", "[2, 4, 4]", "1 or 3"),
        ("", "TYPE_FP32", "[3, 4]", "dims are 3"),
        (
            "scaling = \"VGG\"",
            "TYPE_UINT8",
            "[3, 4, 4]",
            "TYPE_UINT8 with scaling NONE",
        ),
        ("", "TYPE_INT32", "[3, 4, 4]", "writes TYPE_FP32"),
        ("colour = 1", "TYPE_FP32", "[3, 4, 4]", "colour"),
    ] {
        let e = err(&config_text(extra, output, dims));
        assert!(e.contains(want), "{extra} {output} {dims}: {e}");
    }
    let fp32_input = config_text("", "TYPE_FP32", "[3, 4, 4]").replace("TYPE_STRING", "TYPE_FP32");
    assert!(err(&fp32_input).contains("TYPE_STRING, dims = [1]"));
    let tract = config_text("", "TYPE_FP32", "[3, 4, 4]").replace("\"image\"", "\"tract\"");
    assert!(err(&tract).contains("image: only for backend = \"image\""));
}

/// `Model::overridden` (a load's configuration override), on an image model: no ONNX
/// file to need.
#[test]
fn a_model_is_rebuilt_with_an_override_and_back_as_its_file_says() {
    let m = model(&config_text("", "TYPE_FP32", "[3, 4, 4]"));
    assert_eq!(m.built_with(), crate::Override::default());
    let two = crate::Override {
        max_batch_size: Some(2),
    };
    let rebuilt = m.overridden(two).unwrap();
    assert_eq!(rebuilt.tensors().unwrap().max_batch_size, 2);
    assert_eq!(rebuilt.built_with(), two);
    assert_eq!(rebuilt.descriptor().id, m.descriptor().id);
    assert_ne!(rebuilt.descriptor().hash, m.descriptor().hash);
    let image = png(8, 8, |_, _| [7; 3]);
    assert!(run(&rebuilt, &payload(&[&image, &image])).is_ok());
    assert!(run(&rebuilt, &payload(&[&image, &image, &image])).is_err());
    // The file's own value is no override.
    let four = crate::Override {
        max_batch_size: Some(4),
    };
    assert_eq!(rebuilt.normalized(four), Ok(crate::Override::default()));
    let back = rebuilt.overridden(four).unwrap();
    assert_eq!(back.tensors().unwrap().max_batch_size, 4);
    assert_eq!(back.descriptor().hash, m.descriptor().hash);
    // What the config cannot take is refused naming the field.
    let huge = crate::Override {
        max_batch_size: Some(5000),
    };
    let e = m.overridden(huge).err().expect("refused");
    assert!(e.contains("max_batch_size"), "{e}");
}
