// Quality of generated video against a reference video (8-bit RGB frames).
#pragma once

#include <cstdint>
#include <span>

namespace qvg {

/// PSNR in dB over all values of two equally long 8-bit buffers (peak 255):
/// 10 log10(255^2 / MSE). +infinity when they are identical. Throws qvg::Error
/// for different sizes or empty buffers.
double psnr_u8(std::span<const uint8_t> a, std::span<const uint8_t> b);

/// SSIM (Wang et al. 2004) of 8-bit RGB frames [frames, height, width, 3]: per
/// frame and channel, 11x11 Gaussian window (sigma 1.5) over the valid region,
/// C1 = (0.01*255)^2, C2 = (0.03*255)^2; the mean over windows, channels and
/// frames. 1 for identical inputs. Throws qvg::Error for bad sizes or frames
/// smaller than 11x11.
double ssim_rgb(std::span<const uint8_t> a, std::span<const uint8_t> b, int frames, int height, int width);

}  // namespace qvg
