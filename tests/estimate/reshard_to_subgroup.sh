#!/bin/sh
# bytegrad-estimate --fsdp 4 --reshard-after-forward K: PyTorch reads K = 4 (the whole group) as true and
# K = 1 as false; K = 2 keeps half of each block's gathered parameters after forward, so its peak lies
# strictly between the two (the model is sized so that parameters, not activations, set the peak).
set -eu
estimate=$1
peak() {
  "$estimate" gpt2 --n-layer 4 --n-head 4 --n-embd 512 --vocab 512 --block 64 --seq 32 --batch 1 --fsdp 4 \
    --reshard-after-forward "$1" | grep '^peak_allocated' | tr '\n' ' '
}
p_true=$(peak true); p_false=$(peak false); p4=$(peak 4); p1=$(peak 1); p2=$(peak 2)
echo "true:  $p_true"; echo "false: $p_false"; echo "4:     $p4"; echo "1:     $p1"; echo "2:     $p2"
[ "$p4" = "$p_true" ] || { echo "--reshard-after-forward 4 of 4 should equal true"; exit 1; }
[ "$p1" = "$p_false" ] || { echo "--reshard-after-forward 1 should equal false"; exit 1; }
# rank 0's peak (the first peak_allocated line) strictly between
first() { echo "$1" | awk '{print $2}'; }
if [ "$(first "$p_true")" -lt "$(first "$p2")" ] && [ "$(first "$p2")" -lt "$(first "$p_false")" ]; then
  echo "2 of 4 between true and false"
else
  echo "--reshard-after-forward 2 should peak strictly between true and false"; exit 1
fi
