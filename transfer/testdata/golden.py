# Regenerates the golden values of resize_test.go (pillowBicubic), TestOverWhite and
# TestMatchesHFSlowProcessor, and the WebP fixture. Needs Pillow and numpy (Debian: python3-pil
# python3-numpy; the recorded values come from Pillow 9.4.0, numpy 1.24.2). Run from transfer/testdata.
from PIL import Image
import numpy as np


def pattern(W, H):
    a = np.zeros((H, W, 3), dtype=np.uint8)
    for y in range(H):
        for x in range(W):
            a[y, x] = [(x * 37 + y * 11) % 256, (x * x * 5 + y * 29) % 256, (255 - x * 19 + y * y * 3) % 256]
    return Image.fromarray(a, "RGB")


im = pattern(13, 9)
for ow, oh in [(5, 4), (20, 14), (13, 6), (8, 9)]:
    r = np.asarray(im.resize((ow, oh), resample=Image.BICUBIC))
    print("resize", ow, oh, list(int(v) for v in r.flatten()))

for v, a in [(0, 0), (0, 255), (100, 255), (0, 128), (200, 51), (37, 200), (255, 1), (10, 254)]:
    fg = Image.new("RGBA", (1, 1), (v, v, v, a))
    bg = Image.new("RGBA", (1, 1), (255, 255, 255))
    print("composite", v, a, Image.alpha_composite(bg, fg).convert("RGB").getpixel((0, 0))[0])

# HF slow Qwen2VLImageProcessor steps for a 50x37 image, Qwen3-VL geometry (smart_resize -> 224x320).
r = np.asarray(pattern(50, 37).resize((320, 224), resample=Image.BICUBIC))
x = (r.astype(np.float64) * (1 / 255)).astype(np.float32)
mean = np.array([0.5] * 3, dtype=np.float32)
std = np.array([0.5] * 3, dtype=np.float32)
x = ((x - mean) / std).astype(np.float32).transpose(2, 0, 1)[None]
p, m, tp = 16, 2, 2
gh, gw = 224 // p, 320 // p
x = np.tile(x, (tp, 1, 1, 1)).reshape(1, tp, 3, gh // m, m, p, gw // m, m, p)
flat = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gh * gw, 3 * tp * p * p)
for a, b in [(0, 0), (0, 255), (0, 256), (0, 700), (1, 3), (17, 1535), (100, 800), (279, 1000), (279, 1535)]:
    print("pixel_values", a, b, repr(float(flat[a, b])))
print("sum", repr(float(flat.astype(np.float64).sum())))

g = np.zeros((40, 36, 3), dtype=np.uint8)
for y in range(40):
    for xx in range(36):
        g[y, xx] = [xx * 7 % 256, y * 6 % 256, (xx + y) * 3 % 256]
Image.fromarray(g, "RGB").save("gradient-36x40-lossless.webp", lossless=True)
