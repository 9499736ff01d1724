//! `sobel`: `min(255, |gx| + |gy|)` of the 3×3 Sobel kernels, border pixels 0.
//!
//! The image is processed one output row at a time from three input rows, with the
//! nine neighbours taken as nine equally long slices of those rows. Equal lengths let
//! the compiler drop bounds checks and run the row as 16-bit vector arithmetic: every
//! intermediate fits, since `|gx|` and `|gy|` are at most 4·255.

multiversion! {
    /// Writes the Sobel magnitude of the `width × height` image `input` into `out`
    /// (same length, border pixels set to 0).
    pub(super) fn sobel(input: &[u8], out: &mut [u8], width: usize, height: usize) = sobel_body;
}

#[inline(always)]
fn sobel_body(input: &[u8], out: &mut [u8], width: usize, height: usize) {
    assert_eq!(input.len(), width * height);
    assert_eq!(out.len(), input.len());
    if width < 3 || height < 3 {
        out.fill(0);
        return;
    }
    let inner = width - 2;
    out[..width].fill(0);
    out[(height - 1) * width..].fill(0);
    for y in 1..height - 1 {
        out[y * width] = 0;
        out[y * width + width - 1] = 0;
        let row = |dy: usize| &input[(y + dy - 1) * width..(y + dy) * width];
        let (above, here, below) = (row(0), row(1), row(2));
        let (a0, a1, a2) = shifted(above, inner);
        let (h0, _, h2) = shifted(here, inner);
        let (b0, b1, b2) = shifted(below, inner);
        let dst = &mut out[y * width + 1..y * width + 1 + inner];
        for x in 0..inner {
            let p = |r: &[u8]| i16::from(r[x]);
            let gx = (p(a2) - p(a0)) + 2 * (p(h2) - p(h0)) + (p(b2) - p(b0));
            let gy = (p(b0) + 2 * p(b1) + p(b2)) - (p(a0) + 2 * p(a1) + p(a2));
            dst[x] = (gx.abs() + gy.abs()).min(255) as u8;
        }
    }
}

/// The left, centre and right neighbours along a row, as three slices of `inner` pixels.
#[inline(always)]
fn shifted(row: &[u8], inner: usize) -> (&[u8], &[u8], &[u8]) {
    (&row[..inner], &row[1..inner + 1], &row[2..inner + 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;
    use proptest::prelude::*;

    fn check(pixels: &[u8], width: usize, height: usize) {
        let want = reference::sobel(pixels, width, height);
        let mut fast = vec![0xAA; pixels.len()];
        let mut portable = vec![0x55; pixels.len()];
        sobel(pixels, &mut fast, width, height);
        sobel_body(pixels, &mut portable, width, height);
        assert_eq!(fast, want, "{width}x{height}");
        assert_eq!(portable, want, "{width}x{height}");
    }

    #[test]
    fn tiny_and_degenerate_images() {
        for (w, h) in [
            (1, 1),
            (1, 9),
            (9, 1),
            (2, 2),
            (2, 5),
            (5, 2),
            (3, 3),
            (4, 4),
        ] {
            let pixels: Vec<u8> = (0..w * h).map(|i| (i * 97 % 256) as u8).collect();
            check(&pixels, w, h);
        }
    }

    #[test]
    fn saturates_at_255_on_hard_edges() {
        let (w, h) = (37, 5);
        let pixels: Vec<u8> = (0..w * h)
            .map(|i| if (i % w) < w / 2 { 0 } else { 255 })
            .collect();
        check(&pixels, w, h);
        let checker: Vec<u8> = (0..w * h)
            .map(|i| if i % 2 == 0 { 0 } else { 255 })
            .collect();
        check(&checker, w, h);
    }

    proptest! {
        #[test]
        fn matches_reference(
            (w, h, pixels) in (1usize..70, 1usize..12).prop_flat_map(|(w, h)| {
                (Just(w), Just(h), prop::collection::vec(any::<u8>(), w * h))
            })
        ) {
            check(&pixels, w, h);
        }
    }
}
