"""Tiny quantized Qwen2-VL and Qwen2.5-VL checkpoints, as published.

Writes tests/fixtures/models/quant-<name>/ in Hugging Face layout with
config.json's quantization_config and the ref/ cases of
tools/fixtures_models.py (the same prompts and images).  Each checkpoint is
packed by its format's own packer where one installs from PyPI and runs on
a CPU, and the references run in transformers on the checkpoint
dequantized to float32 by that format's own dequantizer:

  awq-*       AutoAWQ 0.2.9 WQLinear_GEMM.from_linear packs (GEMM order
              0 2 4 6 1 3 5 7); AutoAWQ's packing_utils.dequantize_gemm
              dequantizes
  gptq-*      AutoGPTQ 0.7.1 qlinear_cuda.QuantLinear.pack packs (qzeros
              stored minus one, g_idx with desc_act); the GPTQ formula of
              that QuantLinear's torch path dequantizes
  ct-*        compressed-tensors (vLLM llm-compressor's format library):
              its pack-quantized, int-quantized and float-quantized
              compressors compress and decompress
  fp8-block   the quant_method "fp8" layout of Qwen3-VL-FP8 (weight F8_E4M3,
              weight_scale_inv of weight_block_size blocks), as transformers'
              finegrained_fp8 integration reads it, packed here: no packer
              of it runs on a CPU

Scales and zero points are round-to-nearest min/max (GPTQ's Hessian steps
change the codes, not the layout).  The layers that stay in 16 bits (the
vision tower, embeddings, the head, norms, biases) are stored as float16,
as AWQ and GPTQ checkpoints keep them.  The packers come from the
requirements of tools/requirements-quant.txt; the AutoAWQ and AutoGPTQ
modules are loaded from their files, without their packages' imports
(which want CUDA and dataset libraries).
"""

import importlib.util
import json
import os
import shutil
import sys
import types

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures_models as fm  # noqa: E402

from compressed_tensors.compressors import BaseCompressor  # noqa: E402
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationArgs, QuantizationConfig, QuantizationScheme)
from compressed_tensors.quantization.utils import (  # noqa: E402
    calculate_qparams)
from transformers import (Qwen2VLForConditionalGeneration,  # noqa: E402
                          Qwen2_5_VLForConditionalGeneration)
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (  # noqa
    Qwen2VLImageProcessor)

OUT = os.path.join("tests", "fixtures", "models")
SITE = [p for p in sys.path if p.endswith("site-packages")][0]

# wide enough for groups of 128 columns (and two in the MLP's down)
TEXT = dict(fm.TEXT, hidden_size=128, intermediate_size=256,
            num_hidden_layers=2,
            rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6]})

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
           "down_proj")

FIXTURES = [
    # name, architecture, format options
    ("awq-g128", "qwen2_5_vl", dict(fmt="awq", group=128)),
    ("awq-g32", "qwen2_vl", dict(fmt="awq", group=32)),
    ("gptq-g32-actorder", "qwen2_5_vl",
     dict(fmt="gptq", group=32, sym=False, desc_act=True)),
    ("gptq-sym-channel", "qwen2_vl",
     dict(fmt="gptq", group=-1, sym=True, desc_act=False)),
    ("ct-w4a16-g128", "qwen2_5_vl",
     dict(fmt="ct", format="pack-quantized", bits=4, group=128, sym=True)),
    ("ct-w4a16-asym-g32", "qwen2_vl",
     dict(fmt="ct", format="pack-quantized", bits=4, group=32, sym=False)),
    ("ct-w8a8", "qwen2_vl",
     dict(fmt="ct", format="int-quantized", bits=8, group=-1, sym=True)),
    ("ct-fp8-channel", "qwen2_5_vl",
     dict(fmt="ct", format="float-quantized", bits=8, group=-1, sym=True)),
    ("fp8-block", "qwen2_5_vl", dict(fmt="fp8", block=[64, 64])),
]


def load_file(name, rel):
    spec = importlib.util.spec_from_file_location(name,
                                                  os.path.join(SITE, rel))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def awq_modules():
    for pkg in ("awq", "awq.utils", "awq.modules", "awq.modules.linear"):
        mod = types.ModuleType(pkg)
        mod.__path__ = []
        mod.__spec__ = importlib.machinery.ModuleSpec(pkg, None,
                                                      is_package=True)
        sys.modules.setdefault(pkg, mod)
    pu = load_file("awq.utils.packing_utils", "awq/utils/packing_utils.py")
    load_file("awq.utils.module", "awq/utils/module.py")
    load_file("awq.utils.utils", "awq/utils/utils.py")
    gemm = load_file("awq.modules.linear.gemm", "awq/modules/linear/gemm.py")
    return (gemm.WQLinear_GEMM, pu.unpack_awq, pu.reverse_awq_order,
            pu.dequantize_gemm)


def gptq_module():
    return load_file("gptq_qlinear_cuda",
                     "auto_gptq/nn_modules/qlinear/qlinear_cuda.py")


def fp16(t):
    return t.to(torch.float16).to(torch.float32)


def rtn(w, group, sym, bits=4):
    """Round-to-nearest codes of w [out, in]: scales and zero points
    [out, groups], float16-exact scales, unsigned codes in [0, 2^bits)."""
    out, cols = w.shape
    g = cols if group == -1 else group
    wg = w.reshape(out, cols // g, g)
    maxq = 2 ** bits - 1
    if sym:
        amax = wg.abs().amax(-1).clamp(min=1e-5)
        scale = fp16(2 * amax / maxq)
        zero = torch.full_like(scale, (maxq + 1) // 2)
    else:
        lo = wg.amin(-1).clamp(max=0)
        hi = wg.amax(-1).clamp(min=0)
        scale = fp16(((hi - lo) / maxq).clamp(min=1e-5))
        zero = torch.round(-lo / scale).clamp(0, maxq)
    q = torch.clamp(torch.round(wg / scale[..., None]) + zero[..., None],
                    0, maxq)
    deq = ((q - zero[..., None]) * scale[..., None]).reshape(out, cols)
    return deq, scale, zero


def pack_awq(prefix, w, bias, opt, tensors, awq):
    WQLinear_GEMM, unpack_awq, reverse_awq_order, dequantize_gemm = awq
    deq, scale, zero = rtn(w, opt["group"], sym=False)
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=bias is not None)
    with torch.no_grad():
        lin.weight.copy_(deq)
    q = WQLinear_GEMM.from_linear(lin, 4, opt["group"],
                                  scales=scale.t().contiguous(),
                                  zeros=zero.t().contiguous())
    tensors[prefix + ".qweight"] = q.qweight
    tensors[prefix + ".qzeros"] = q.qzeros
    tensors[prefix + ".scales"] = q.scales.half()
    # AutoAWQ's unpacking (its dequantize_gemm, but in float32: its
    # float16 products would round what the checkpoint says)
    iw, iz = unpack_awq(q.qweight, q.qzeros, 4)
    iw, iz = reverse_awq_order(iw, iz, 4)
    iw = torch.bitwise_and(iw, 15)
    iz = torch.bitwise_and(iz, 15)
    iz = iz.repeat_interleave(opt["group"], dim=0)
    sc = q.scales.half().float().repeat_interleave(opt["group"], dim=0)
    back = ((iw.float() - iz.float()) * sc).t()
    assert torch.allclose(back, deq, rtol=0, atol=1e-6)
    half = dequantize_gemm(q.qweight, q.qzeros, q.scales.half(), 4,
                           opt["group"]).float().t()
    assert torch.allclose(half, back, rtol=1e-3, atol=1e-3)
    return back.contiguous()


def gptq_dequant(qweight, qzeros, scales, g_idx, bits):
    """AutoGPTQ QuantLinear's torch path (qlinear_cuda.py forward)."""
    wf = torch.tensor(list(range(0, 32, bits)), dtype=torch.int32)[None]
    zeros = torch.bitwise_right_shift(
        torch.unsqueeze(qzeros, 2).expand(-1, -1, 32 // bits),
        wf.unsqueeze(0)).to(torch.int16)
    zeros = torch.bitwise_and(zeros, (2 ** bits) - 1)
    zeros = zeros + 1
    zeros = zeros.reshape(scales.shape)
    weight = torch.bitwise_right_shift(
        torch.unsqueeze(qweight, 1).expand(-1, 32 // bits, -1),
        wf.unsqueeze(-1)).to(torch.int16)
    weight = torch.bitwise_and(weight, (2 ** bits) - 1)
    weight = weight.reshape(weight.shape[0] * weight.shape[1],
                            weight.shape[2])
    return (scales.float()[g_idx.long()]
            * (weight - zeros[g_idx.long()]).float())


def pack_gptq(prefix, w, bias, opt, tensors, QuantLinear, rng):
    out, cols = w.shape
    group = cols if opt["group"] == -1 else opt["group"]
    ng = cols // group
    if opt["desc_act"]:
        # act order: the columns quantized in a permuted order, their
        # groups following it (g_idx = perm^-1 // group)
        perm = torch.tensor(rng.permutation(cols))
        g_idx = torch.empty(cols, dtype=torch.int32)
        g_idx[perm] = torch.arange(cols, dtype=torch.int32) // group
    else:
        g_idx = torch.arange(cols, dtype=torch.int32) // group
    # the codes of column k in group g_idx[k]
    order = torch.argsort(g_idx, stable=True)
    deq_sorted, scale, zero = rtn(w[:, order], group, opt["sym"])
    deq = torch.empty_like(deq_sorted)
    deq[:, order] = deq_sorted
    lin = torch.nn.Linear(cols, out, bias=bias is not None)
    with torch.no_grad():
        lin.weight.copy_(deq)
    q = QuantLinear(4, group, cols, out, bias is not None,
                    weight_dtype=torch.float32)
    q.pack(lin, scale, zero, g_idx=g_idx)
    tensors[prefix + ".qweight"] = q.qweight
    tensors[prefix + ".qzeros"] = q.qzeros
    tensors[prefix + ".scales"] = q.scales.half()
    tensors[prefix + ".g_idx"] = g_idx
    assert ng == q.scales.shape[0]
    back = gptq_dequant(q.qweight, q.qzeros, q.scales.half(), g_idx, 4).t()
    assert torch.allclose(back, deq, rtol=0, atol=1e-3)
    return back.contiguous()


def ct_args(opt):
    if opt["format"] == "float-quantized":
        return QuantizationArgs(num_bits=8, type="float", symmetric=True,
                                strategy="channel")
    if opt["group"] == -1:
        return QuantizationArgs(num_bits=opt["bits"], type="int",
                                symmetric=opt["sym"], strategy="channel")
    return QuantizationArgs(num_bits=opt["bits"], type="int",
                            symmetric=opt["sym"], strategy="group",
                            group_size=opt["group"])


def pack_ct(prefix, w, bias, opt, tensors, scheme):
    args = scheme.weights
    out, cols = w.shape
    g = cols if opt["group"] == -1 else opt["group"]
    wg = w.reshape(out, cols // g, g)
    scale, zp = calculate_qparams(wg.amin(-1), wg.amax(-1), args)
    scale = scale.to(torch.bfloat16)
    comp = BaseCompressor.load_from_registry(opt["format"])
    sd = {"weight": w, "weight_scale": scale}
    if not opt["sym"]:
        sd["weight_zero_point"] = zp.to(torch.int8)
    packed = comp.compress(sd, scheme)
    for k, v in packed.items():
        tensors[prefix + "." + k] = v.contiguous()
    # the library's dequantization, of the stored scales in float32
    back = comp.decompress({k: v.float() if k == "weight_scale" else v
                            for k, v in packed.items()}, scheme)["weight"]
    return back.float().contiguous()


def pack_fp8(prefix, w, bias, opt, tensors):
    br, bc = opt["block"]
    out, cols = w.shape
    wb = w.reshape(out // br, br, cols // bc, bc)
    amax = wb.abs().amax(dim=(1, 3)).clamp(min=1e-5)
    scale = amax / 448.0
    q = (wb / scale[:, None, :, None]).reshape(out, cols)
    q = q.to(torch.float8_e4m3fn)
    tensors[prefix + ".weight"] = q
    tensors[prefix + ".weight_scale_inv"] = scale.float()
    back = (q.float().reshape(out // br, br, cols // bc, bc)
            * scale[:, None, :, None]).reshape(out, cols)
    return back.contiguous()


def quant_config(opt, scheme):
    if opt["fmt"] == "awq":
        return dict(quant_method="awq", bits=4, group_size=opt["group"],
                    zero_point=True, version="gemm",
                    modules_to_not_convert=["visual"])
    if opt["fmt"] == "gptq":
        return dict(quant_method="gptq", bits=4, group_size=opt["group"],
                    sym=opt["sym"], desc_act=opt["desc_act"],
                    checkpoint_format="gptq", damp_percent=0.01,
                    true_sequential=True, static_groups=False,
                    modules_in_block_to_quantize=None)
    if opt["fmt"] == "fp8":
        return dict(quant_method="fp8", fmt="e4m3",
                    activation_scheme="dynamic",
                    weight_block_size=opt["block"],
                    modules_to_not_convert=["visual", "lm_head"])
    qc = QuantizationConfig(config_groups={"group_0": scheme},
                            format=opt["format"],
                            ignore=["lm_head", "re:.*visual.*"],
                            quantization_status="compressed")
    return qc.model_dump(exclude_none=True)


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(11)
    proc = Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=140 * 140,
                                 patch_size=14, temporal_patch_size=2,
                                 merge_size=2)
    images = fm.make_images(proc, 1)
    awq = awq_modules()
    QuantLinear = gptq_module().QuantLinear
    fm.TEXT = TEXT

    for k, (name, arch, opt) in enumerate(FIXTURES):
        d = os.path.join(OUT, "quant-" + name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        cfg = fm.make_config(arch, False)
        # the merger writes the language model's width
        if arch == "qwen2_vl":
            cfg.vision_config.hidden_size = TEXT["hidden_size"]
        else:
            cfg.vision_config.out_hidden_size = TEXT["hidden_size"]
        cls = (Qwen2VLForConditionalGeneration if arch == "qwen2_vl"
               else Qwen2_5_VLForConditionalGeneration)
        model = cls(cfg).eval()
        fm.randomize(model, 200 + k)
        # the 16-bit layers as float16, as the checkpoints keep them
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(fp16(p))

        scheme = None
        if opt["fmt"] == "ct":
            scheme = QuantizationScheme(targets=["Linear"],
                                        weights=ct_args(opt))

        # the language model's linear layers, quantized; the rest as is
        model.save_pretrained(d, safe_serialization=True)
        sd = {}
        from safetensors.torch import load_file as st_load
        for key, v in st_load(os.path.join(d, "model.safetensors")).items():
            sd[key] = v
        os.remove(os.path.join(d, "model.safetensors"))

        tensors = {}
        deq = {}
        for key, v in sd.items():
            base = key[:-len(".weight")]
            if (key.endswith(".weight") and "visual" not in key
                    and base.split(".")[-1] in LINEARS):
                w = v.float()
                bias = sd.get(base + ".bias")
                if opt["fmt"] == "awq":
                    deq[key] = pack_awq(base, w, bias, opt, tensors, awq)
                elif opt["fmt"] == "gptq":
                    deq[key] = pack_gptq(base, w, bias, opt, tensors,
                                         QuantLinear, rng)
                elif opt["fmt"] == "ct":
                    deq[key] = pack_ct(base, w, bias, opt, tensors, scheme)
                else:
                    deq[key] = pack_fp8(base, w, bias, opt, tensors)
            else:
                tensors[key] = v.to(torch.float16).contiguous()
        save_file({kk: vv.contiguous() for kk, vv in tensors.items()},
              os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})

        with open(os.path.join(d, "config.json")) as f:
            conf = json.load(f)
        conf["quantization_config"] = quant_config(opt, scheme)
        conf["dtype"] = "float16"
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(conf, f, indent=2, sort_keys=True)
        fm.GenerationConfig(bos_token_id=fm.ENDOFTEXT,
                            eos_token_id=[fm.IM_END, fm.ENDOFTEXT],
                            do_sample=False).save_pretrained(d)
        proc.save_pretrained(d)

        # the reference: the same checkpoint, dequantized to float32,
        # loaded by transformers from its own directory
        tmp = d + ".f32"
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
        os.makedirs(tmp)
        state = {kk: vv.float().contiguous() for kk, vv in sd.items()}
        state.update(deq)
        save_file(state, os.path.join(tmp, "model.safetensors"),
                  metadata={"format": "pt"})
        del conf["quantization_config"]
        conf["dtype"] = "float32"
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(conf, f)
        ref = cls.from_pretrained(tmp, dtype=torch.float32,
                                  attn_implementation="eager").eval()
        shutil.rmtree(tmp)
        case_rng = np.random.default_rng(7)
        for case, imgs in (("text", []), ("image1", images[:1]),
                           ("image2", images[::-1])):
            ids = fm.prompt_ids(case_rng, imgs, 2)
            gap = fm.reference(ref, ids, imgs, os.path.join(d, "ref", case),
                               case == "text")
            print("quant-%s/%s: %d tokens, top-2 gap %.4f"
                  % (name, case, len(ids), gap))


if __name__ == "__main__":
    main()
