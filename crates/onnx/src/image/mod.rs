//! The `image` engine: a repository model (`backend = "image"`) that decodes encoded
//! images (PNG or JPEG, one BYTES element each) and turns them into the tensor an
//! image classifier takes — resized to its height and width, RGB or grey, in NCHW or
//! NHWC, scaled as Triton's image clients scale (`NONE`, `INCEPTION`, `VGG`). It is
//! the first step of an ensemble whose client sends the image file's bytes (Triton's
//! `ensemble_image_client`), as Triton's DALI or Python preprocessing model is.
//!
//! ```toml
//! backend = "image"
//! max_batch_size = 8
//! [image]
//! scaling = "INCEPTION"     # NONE (default), INCEPTION (x / 127.5 - 1), VGG (x - the channel's mean)
//! format = "FORMAT_NCHW"    # or FORMAT_NHWC: the output's layout (default NCHW)
//! pixels_max = 16777216     # an image declaring more pixels is refused before decoding
//! [[input]]
//! name = "INPUT"
//! data_type = "TYPE_STRING" # one encoded image an item
//! dims = [1]
//! [[output]]
//! name = "OUTPUT"
//! data_type = "TYPE_FP32"   # or TYPE_UINT8 with scaling NONE
//! dims = [3, 224, 224]      # channels (3: RGB, 1: grey), height, width in `format`'s order
//! ```
//!
//! Bounded: an image's header is read first and an image whose declared width ×
//! height exceeds `pixels_max` is refused before a pixel is decoded, and the decoder
//! runs under the image crate's allocation limit of that budget, so a hostile client
//! cannot make the node allocate more than a few times the budget's bytes whatever
//! its file claims. Only PNG and JPEG are compiled in. An image that does not decode
//! is that call's error (BAD_REQUEST, naming the item and the reason).
//!
//! Not for: parsing the image formats (the `image` crate does), or anything beyond
//! what an image classifier's input needs (no crops, no colour management).

use std::io::Cursor;

use ::image::imageops::{self, FilterType};
use ::image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader, Limits};
use accel::tensors::{bytes_elements, DataType, Tensors};
use accel::CallError;
use serde::Deserialize;

/// Default `pixels_max`: 4096 × 4096.
pub const PIXELS_DEFAULT: u64 = 1 << 24;
/// Largest `pixels_max` a config may set: 8192 × 8192.
pub const PIXELS_MAX: u64 = 1 << 26;
/// Bytes the decoder may hold per pixel of the budget: 16-bit RGBA and its
/// conversion, the widest a PNG decodes to.
const ALLOC_PER_PIXEL: u64 = 16;

/// How the pixel values are scaled, by Triton's image clients' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaling {
    /// The 0–255 values as they are.
    None,
    /// `x / 127.5 - 1`: -1 to 1.
    Inception,
    /// `x` minus the channel's ImageNet mean (123, 117, 104; 128 for grey).
    Vgg,
}

/// `[image]` of a config, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Section {
    #[serde(default)]
    scaling: Option<String>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    pixels_max: Option<u64>,
}

/// What one image becomes: checked against the model's tensors at load.
#[derive(Clone, Debug, PartialEq)]
pub struct Preprocess {
    pub width: u32,
    pub height: u32,
    /// 3 (RGB) or 1 (grey).
    pub channels: u32,
    /// Channels first (`FORMAT_NCHW`) or last (`FORMAT_NHWC`).
    pub channels_first: bool,
    pub scaling: Scaling,
    /// FP32 or UINT8.
    pub datatype: DataType,
    /// Most pixels an image may declare.
    pub pixels_max: u64,
}

impl Preprocess {
    /// The preprocessing `section` and the model's `tensors` declare, or why they do
    /// not fit (naming the field).
    pub(crate) fn new(section: Section, t: &Tensors) -> Result<Preprocess, String> {
        let scaling = match section.scaling.as_deref().unwrap_or("NONE") {
            "NONE" => Scaling::None,
            "INCEPTION" => Scaling::Inception,
            "VGG" => Scaling::Vgg,
            other => {
                return Err(format!(
                    "image.scaling: `{other}` is not one of NONE, INCEPTION, VGG"
                ))
            }
        };
        let channels_first = match section.format.as_deref().unwrap_or("FORMAT_NCHW") {
            "FORMAT_NCHW" => true,
            "FORMAT_NHWC" => false,
            other => {
                return Err(format!(
                    "image.format: `{other}` is not FORMAT_NCHW or FORMAT_NHWC"
                ))
            }
        };
        let pixels_max = section.pixels_max.unwrap_or(PIXELS_DEFAULT);
        if !(1..=PIXELS_MAX).contains(&pixels_max) {
            return Err(format!(
                "image.pixels_max: {pixels_max} is not within 1..={PIXELS_MAX}"
            ));
        }
        let ([input], [output]) = (&t.inputs[..], &t.outputs[..]) else {
            return Err(
                "backend = \"image\": one input (the encoded images) and one output".into(),
            );
        };
        if input.datatype != DataType::Bytes || input.dims != [1] {
            return Err(format!(
                "input `{}`: backend = \"image\" takes one encoded image an item: TYPE_STRING, dims = [1]",
                input.name
            ));
        }
        let datatype = output.datatype;
        match (datatype, scaling) {
            (DataType::Fp32, _) | (DataType::Uint8, Scaling::None) => {}
            _ => {
                return Err(format!(
                    "output `{}`: backend = \"image\" writes TYPE_FP32, or TYPE_UINT8 with scaling NONE",
                    output.name
                ))
            }
        }
        let dims: Vec<u64> = output.dims.clone();
        let [c, h, w] = match (channels_first, &dims[..]) {
            (true, &[c, h, w]) | (false, &[h, w, c]) => [c, h, w],
            _ => {
                return Err(format!(
                    "output `{}`: an image's dims are 3 (channels, height, width in the order of image.format)",
                    output.name
                ))
            }
        };
        let fits = |d: u64| (1..=u64::from(u32::MAX)).contains(&d);
        if !matches!(c, 1 | 3) || !fits(h) || !fits(w) || h.saturating_mul(w) > pixels_max {
            return Err(format!(
                "output `{}`: {c} channels (1 or 3) of {h} × {w} pixels (at most image.pixels_max, {pixels_max})",
                output.name
            ));
        }
        Ok(Preprocess {
            width: w as u32,
            height: h as u32,
            channels: c as u32,
            channels_first,
            scaling,
            datatype,
            pixels_max,
        })
    }

    /// Bytes one item's output takes.
    pub fn item_bytes(&self) -> usize {
        let values = self.channels as usize * self.height as usize * self.width as usize;
        values * self.datatype.fixed_size().expect("FP32 or UINT8")
    }

    /// Runs one call: `input` is `batch` BYTES elements (one encoded image each), `out`
    /// gets each one's tensor after the other.
    pub fn run(&self, t: &Tensors, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        let (batch, parts) = t.split_inputs(input)?;
        debug_assert_eq!(parts.len(), 1, "one input, checked at load");
        out.reserve(batch * self.item_bytes());
        let mut items = 0;
        for (k, element) in bytes_elements(parts[0]).enumerate() {
            let element = element.map_err(CallError::BadRequest)?;
            let image = self
                .decode(element)
                .map_err(|e| CallError::BadRequest(format!("image {k}: {e}")))?;
            self.write(&image, out);
            items += 1;
        }
        if items != batch {
            return Err(CallError::BadRequest(format!(
                "{items} images where the batch is {batch}"
            )));
        }
        debug_assert_eq!(out.len(), batch * self.item_bytes());
        Ok(())
    }

    /// One image decoded and resized to the output's height and width, in its
    /// channels; the pixel budget checked on the header before anything is decoded.
    fn decode(&self, bytes: &[u8]) -> Result<DynamicImage, String> {
        let mut reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| e.to_string())?;
        match reader.format() {
            Some(ImageFormat::Png | ImageFormat::Jpeg) => {}
            Some(f) => return Err(format!("{f:?} images are not decoded here: PNG or JPEG")),
            None => return Err("not a PNG or JPEG image".to_string()),
        }
        let mut limits = Limits::default();
        limits.max_alloc = Some(self.pixels_max * ALLOC_PER_PIXEL);
        reader.limits(limits);
        let over = |what: String| {
            format!(
                "{what}, more than this model's budget of {} pixels (image.pixels_max)",
                self.pixels_max
            )
        };
        // The decoders check the limits on the header, before any pixel.
        let decoder = reader.into_decoder().map_err(|e| match e {
            ImageError::Limits(e) => over(format!("it is too large to decode ({e})")),
            e => e.to_string(),
        })?;
        let (w, h) = decoder.dimensions();
        if u64::from(w) * u64::from(h) > self.pixels_max {
            return Err(over(format!("it declares {w} × {h} pixels")));
        }
        let image = DynamicImage::from_decoder(decoder).map_err(|e| e.to_string())?;
        let (width, height) = (self.width, self.height);
        Ok(match self.channels {
            1 => imageops::resize(&image.to_luma8(), width, height, FilterType::Triangle).into(),
            _ => imageops::resize(&image.to_rgb8(), width, height, FilterType::Triangle).into(),
        })
    }

    /// Appends `image`'s values in the output's layout, type and scaling.
    fn write(&self, image: &DynamicImage, out: &mut Vec<u8>) {
        let c = self.channels as usize;
        let samples = image.as_bytes();
        debug_assert_eq!(
            samples.len(),
            c * self.width as usize * self.height as usize
        );
        let pixels = samples.len() / c;
        let at = |i: usize| -> (usize, usize) {
            // Value `i` of the output: which channel and pixel it comes from.
            if self.channels_first {
                (i / pixels, i % pixels)
            } else {
                (i % c, i / c)
            }
        };
        for i in 0..samples.len() {
            let (channel, pixel) = at(i);
            let x = samples[pixel * c + channel];
            match self.datatype {
                DataType::Uint8 => out.push(x),
                _ => out.extend_from_slice(&self.scale(channel, x).to_le_bytes()),
            }
        }
    }

    fn scale(&self, channel: usize, x: u8) -> f32 {
        let x = f32::from(x);
        match self.scaling {
            Scaling::None => x,
            Scaling::Inception => x / 127.5 - 1.0,
            Scaling::Vgg if self.channels == 1 => x - 128.0,
            Scaling::Vgg => x - [123.0, 117.0, 104.0][channel],
        }
    }
}

#[cfg(test)]
mod tests;

/// The body of the `image_input` fuzz target (`fuzz/`), replayed over its corpus by
/// `tests/fuzz_corpus.rs`: any bytes as one image to a model of 3 × 8 × 8 FP32 values
/// (INCEPTION) with a budget of 4096 pixels. It decodes to exactly its values, each
/// within -1..=1, or is refused BAD_REQUEST naming the image; never a panic.
pub mod fuzzing {
    use super::*;

    pub fn image_input(data: &[u8]) {
        let spec = |name: &str, datatype, dims| accel::tensors::TensorSpec {
            name: name.to_string(),
            datatype,
            dims,
        };
        let t = Tensors {
            inputs: vec![spec("INPUT", DataType::Bytes, vec![1])],
            outputs: vec![spec("OUTPUT", DataType::Fp32, vec![3, 8, 8])],
            max_batch_size: 4,
        };
        let section = Section {
            scaling: Some("INCEPTION".into()),
            format: None,
            pixels_max: Some(4096),
        };
        let p = Preprocess::new(section, &t).expect("a valid model");
        let mut payload = Vec::with_capacity(data.len() + 4);
        accel::tensors::push_bytes_element(data, &mut payload);
        let mut out = Vec::new();
        match p.run(&t, &payload, &mut out) {
            Ok(()) => {
                assert_eq!(out.len(), p.item_bytes());
                assert!(out
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .all(|v| (-1.0..=1.0).contains(&v)));
            }
            Err(CallError::BadRequest(m)) => assert!(m.starts_with("image 0: ") && m.len() > 9),
            Err(e) => panic!("not the caller's error: {e:?}"),
        }
    }
}
