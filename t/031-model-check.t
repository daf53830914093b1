# nginx -t checks what the engine would refuse, with the engine's own
# loader run on the safetensors headers: another architecture, no
# weights, tensors missing, of the wrong shape or dtype, quantized
# tensors that do not fit their quantization_config, weights the
# engine's user cannot read, and a chat template the interpreter cannot
# parse (another model's template that it can is served).  Each is an
# [emerg] that names the file and the cause.

use Test::Nginx::Socket;
use FindBin;
# a stopped nginx reaped at once by this process (t/lib/VLMReap.pm)
BEGIN { require "$FindBin::Bin/lib/VLMReap.pm" }
use File::Temp qw(tempdir);
use JSON::PP ();
use Cwd qw(abs_path);

my $models = tempdir("vlm-check-XXXXXX", TMPDIR => 1, CLEANUP => 1);

# the port of the configurations that only pass nginx -t (it binds
# nothing), below TEST_NGINX_PORT as every port of the suites derives
my $check_port = ($ENV{TEST_NGINX_PORT} || 1994) - 11;
# the engine's user (nobody, when the tests run as root) walks it
chmod 0755, $models or die;

sub slurp {
    my ($path) = @_;
    open my $in, '<:raw', $path or die "cannot read $path: $!";
    local $/;
    return scalar <$in>;
}

sub spew {
    my ($path, $data) = @_;
    open my $out, '>:raw', $path or die "cannot write $path: $!";
    print $out $data;
    close $out;
}

# a copy of the serving fixture (or of $src's files), then an edit of one
# of its JSON files
sub model {
    my ($name, $file, $edit, $src) = @_;
    my $dir = "$models/$name";
    mkdir $dir or die "$dir: $!";
    chmod 0755, $dir;
    for my $f (grep { -f } glob(($src || "tests/fixtures/serving") . "/*")) {
        system("cp", $f, "$dir/") == 0 or die "cannot copy $f";
    }
    if (defined $file) {
        my $json = JSON::PP->new->canonical->pretty;
        my $doc = $json->decode(slurp("$dir/$file"));
        $edit->($doc);
        spew("$dir/$file", $json->encode($doc));
    }
    return $dir;
}

model("good");
model("llama", "config.json", sub {
    $_[0]{architectures} = ["LlamaForCausalLM"];
    $_[0]{model_type} = "llama";
});
model("qwen3moe", "config.json", sub {
    $_[0]{architectures} = ["Qwen3VLMoeForConditionalGeneration"];
    $_[0]{model_type} = "qwen3_vl_moe";
});
model("smolvlmproc", "preprocessor_config.json", sub {
    $_[0]{image_processor_type} = "SmolVLMImageProcessor";
});
# SmolVLM: served with its own processor, refused with Qwen2-VL's
my $smolvlm = "tests/fixtures/idefics3/smolvlm-chat";
model("smolvlm", undef, undef, $smolvlm);
model("smolvlm-qwenproc", "preprocessor_config.json", sub {
    $_[0]{image_processor_type} = "Qwen2VLImageProcessor";
}, $smolvlm);
# InternVL: served with GotOcr2's processor, refused with Qwen2-VL's or
# with a decoder option the engine does not run
my $internvl = "tests/fixtures/internvl/internvl-chat";
model("internvl", undef, undef, $internvl);
model("internvl-qwenproc", "preprocessor_config.json", sub {
    $_[0]{image_processor_type} = "Qwen2VLImageProcessor";
}, $internvl);
model("internvl-sliding", "config.json", sub {
    $_[0]{text_config}{use_sliding_window} = JSON::PP::true;
}, $internvl);
# Gemma 3: final logit softcapping and pan and scan, refused by name
my $gemma3 = "tests/fixtures/gemma3/gemma3-chat";
model("gemma3-softcap", "config.json", sub {
    $_[0]{text_config}{final_logit_softcapping} = 30.0;
}, $gemma3);
model("gemma3-panscan", "preprocessor_config.json", sub {
    $_[0]{do_pan_and_scan} = JSON::PP::true;
}, $gemma3);
my $noweights = model("noweights");
unlink "$noweights/model.safetensors" or die;
model("shape", "config.json", sub {
    $_[0]{text_config}{intermediate_size} = 96;
});
model("layers", "config.json", sub {
    $_[0]{text_config}{num_hidden_layers} = 3;
});
model("template", "chat_template.json", sub {
    my $qwen = JSON::PP->new->decode(
        slurp("tests/fixtures/tokenizer/qwen/tokenizer_config.json"));
    $_[0]{chat_template} = $qwen->{chat_template};
});
model("badtemplate", "chat_template.json", sub {
    $_[0]{chat_template} = "{% for m in messages %}\n{{ m.content }}";
});
# chat_template.jinja comes first, as in transformers
my $jinja = model("jinja");
spew("$jinja/chat_template.jinja", "{% if x %}{{ x }}{% endfor %}\n");
my $notemplate = model("notemplate", "tokenizer_config.json", sub {
    delete $_[0]{chat_template};
});
unlink "$notemplate/chat_template.json" or die;

# a dtype the engine does not run: the first F32 tensor's header says I32
# (same element size, so only the dtype is wrong)
{
    my $dir = model("dtype");
    my $st = slurp("$dir/model.safetensors");
    my $hlen = unpack("Q<", substr($st, 0, 8));
    my $header = substr($st, 8, $hlen);
    $header =~ s/"dtype":\s*"F32"/"dtype":"I32"/ or die "no F32 tensor";
    $header .= " " x ($hlen - length $header);
    substr($st, 8, $hlen) = $header;
    spew("$dir/model.safetensors", $st);
}

# quantized: the AWQ fixture's config and weights with the serving
# fixture's tokenizer; one whose config says groups of 64 where the
# weights have 128
for my $q (["awq", 128], ["awq-g64", 64]) {
    my $dir = model($q->[0]);
    for my $f (qw(config.json generation_config.json model.safetensors)) {
        system("cp", "tests/fixtures/models/quant-awq-g128/$f", "$dir/") == 0
            or die "cannot copy $f";
    }
    my $json = JSON::PP->new->canonical->pretty;
    my $doc = $json->decode(slurp("$dir/config.json"));
    $doc->{quantization_config}{group_size} = $q->[1];
    spew("$dir/config.json", $json->encode($doc));
}

$ENV{TEST_NGINX_MODELS} = $models;

# nginx -t itself, with a configuration of our own: the engine's user is
# the workers' ("nobody" when root runs nginx, else the caller)
my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
my ($module) = grep { /ngx_http_vlm_module\.so$/ } split /\s+/,
               $ENV{TEST_NGINX_LOAD_MODULES} || '';
$module ||= abs_path("build/ngx_http_vlm_module.so");
my $engine = abs_path("build/vlm-engine");
my $user = $> == 0 ? "nobody" : scalar getpwuid($>);

sub nginx_t {
    my ($model, $http) = @_;
    $http //= '';
    my $prefix = tempdir("vlm-check-prefix-XXXXXX", TMPDIR => 1,
                         CLEANUP => 1);
    mkdir "$prefix/logs";
    my $user_line = $> == 0 ? "user nobody nogroup;" : "";
    spew("$prefix/nginx.conf", <<"_EOC_");
load_module $module;
error_log stderr;
pid $prefix/nginx.pid;
events { }
http {
    vlm_model $model;
    vlm_engine_binary $engine;
$http
    server { listen 127.0.0.1:$check_port; location / { return 204; } }
}
$user_line
_EOC_
    my $out = `$nginx -t -p $prefix -c $prefix/nginx.conf 2>&1`;
    return ($? >> 8, $out);
}


# the configuration line an emerg names ("... in FILE:LINE"), and whether
# nginx said "syntax is ok" first
sub named_line {
    my ($out) = @_;

    my ($file, $line) = $out =~ /\[emerg\] .* in (\S+):(\d+)$/m
        or return ('', 0);
    open my $in, '<', $file or return ('', 0);
    my @lines = <$in>;

    return ($lines[$line - 1] // '', $out =~ /syntax is ok/ ? 1 : 0);
}

my $direct = 28;

repeat_each(1);

plan tests => repeat_each() * 2 * blocks() + $direct;

{
    my ($rc, $out) = nginx_t("$models/good");
    is($rc, 0, "nginx -t passes a good model read as user $user")
        or diag($out);

    ($rc, $out) = nginx_t("$models/awq");
    is($rc, 0, "nginx -t passes an AWQ checkpoint") or diag($out);

    ($rc, $out) = nginx_t("$models/awq-g64");
    isnt($rc, 0, "nginx -t fails on AWQ scales of another group size");
    like($out, qr{\[emerg\] .*vlm_model "[^"]+/awq-g64": model: tensor "model\.layers\.0\.self_attn\.q_proj\.qzeros" has shape \[1, 16\] \(2 dims\), AWQ int4 of group 64 for \[128, 128\] needs \[2, 16\]},
         "and names the tensor, its shape and the shape the config needs");

    ($rc, $out) = nginx_t("$models/smolvlm");
    is($rc, 0, "nginx -t passes a SmolVLM checkpoint") or diag($out);

    ($rc, $out) = nginx_t("$models/smolvlm-qwenproc");
    isnt($rc, 0, "nginx -t fails on SmolVLM with Qwen2-VL's processor");
    like($out, qr{\[emerg\] .*vlm_model "[^"]+/smolvlm-qwenproc": \S+/smolvlm-qwenproc/preprocessor_config\.json: image_processor_type "Qwen2VLImageProcessor" is not the Idefics3 / SmolVLM processor this model's architecture takes},
         "and names the file and the processor");

    ($rc, $out) = nginx_t("$models/internvl");
    is($rc, 0, "nginx -t passes an InternVL checkpoint") or diag($out);

    ($rc, $out) = nginx_t("$models/internvl-qwenproc");
    isnt($rc, 0, "nginx -t fails on InternVL with Qwen2-VL's processor");
    like($out, qr{\[emerg\] .*vlm_model "[^"]+/internvl-qwenproc": \S+/internvl-qwenproc/preprocessor_config\.json: image_processor_type "Qwen2VLImageProcessor" is not the GotOcr2 processor this model's architecture takes},
         "and names the file and the processor");

    ($rc, $out) = nginx_t("$models/internvl-sliding");
    isnt($rc, 0, "nginx -t fails on InternVL with sliding-window attention");
    like($out, qr{\[emerg\] .*vlm_model "[^"]+/internvl-sliding": config: "[^"]+/config\.json": text: use_sliding_window is not supported},
         "and names the key");

    ($rc, $out) = nginx_t("$models/template");
    is($rc, 0, "nginx -t passes a model with Qwen3's chat template")
        or diag($out);

    ($rc, $out) = nginx_t($jinja);
    isnt($rc, 0, "nginx -t fails on a malformed chat_template.jinja");
    like($out, qr{\[emerg\] .*vlm_model "[^"]+/jinja": the chat_template in "[^"]+/jinja/chat_template\.jinja": chat template line 1: unexpected 'endfor'},
         "and names chat_template.jinja, the line and the cause");

    ($rc, $out) = nginx_t("$models/llama");
    isnt($rc, 0, "nginx -t fails on LlamaForCausalLM");
    like($out, qr{\[emerg\] .*vlm_model "[^"]+/llama": config: "[^"]+/llama/config\.json": architecture "LlamaForCausalLM" is not supported},
         "and names config.json and the architecture");
    my ($named, $ok_first) = named_line($out);
    like($named, qr/^\s*vlm_model /,
         "a broken config.json is reported at vlm_model's line")
        or diag($out);
    is($ok_first, 0, 'before nginx -t says "syntax is ok"');

    ($rc, $out) = nginx_t("$models/good", "    vlm_max_queued 4000;\n"
                                          . "    vlm_zone vlm size=1m;\n");
    like($out, qr/vlm_zone "vlm" of 1048576 bytes is too small/,
         'a vlm_zone too small for its slots fails');
    ($named) = named_line($out);
    like($named, qr/^\s*vlm_zone /, "and is reported at vlm_zone's line")
        or diag($out);

    # weights only the master's user can read
    my $dir = model("unreadable");
    chmod 0000, "$dir/model.safetensors" or die;
    ($rc, $out) = nginx_t($dir);
    isnt($rc, 0, "nginx -t fails on weights user $user cannot read");
    like($out, qr{\[emerg\] .*vlm_model "[^"]+/unreadable": safetensors: open\("[^"]+/unreadable/model\.safetensors"\): Permission denied \(the engine runs as user "\Q$user\E"\)},
         "and names the file, the cause and the engine's user");
    ($named, $ok_first) = named_line($out);
    like($named, qr/^\s*vlm_model /, "at vlm_model's line") or diag($out);
    is($ok_first, 0, 'before nginx -t says "syntax is ok"');

    # the "user" given before http{}, as most configurations do
    SKIP: {
        skip "not run as root: no other user for the engine", 2 if $> != 0;
        my $p = tempdir("vlm-check-prefix-XXXXXX", TMPDIR => 1,
                        CLEANUP => 1);
        spew("$p/nginx.conf", "load_module $module;\nerror_log stderr;\n"
             . "pid $p/nginx.pid;\nuser nobody nogroup;\nevents { }\n"
             . "http {\n    vlm_model $dir;\n"
             . "    vlm_engine_binary $engine;\n}\n");
        my $o = `$nginx -t -p $p -c $p/nginx.conf 2>&1`;
        like($o, qr{vlm_model "[^"]+/unreadable": .*Permission denied \(the engine runs as user "nobody"\) in \S+nginx\.conf:7$}m,
             '"user" before http{}: at vlm_model\'s line');
        unlike($o, qr/syntax is ok/, 'and nginx -t does not say the syntax '
                                     . 'is ok');
    }

    # the directory itself closed to the engine's user (its owner, root,
    # still enters it: only a run as root has another user to test)
    SKIP: {
        skip "not run as root: no other user for the engine", 1 if $> != 0;
        chmod 0644, "$dir/model.safetensors";
        chmod 0700, $dir;
        ($rc, $out) = nginx_t($dir);
        like($out, qr{\[emerg\] .*vlm_model "[^"]+/unreadable": .*Permission denied \(the engine runs as user "nobody"\)},
             "a model directory user nobody cannot enter fails too")
            or diag($out);
    }
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: an architecture the engine does not run
--- http_config
    vlm_model $TEST_NGINX_MODELS/llama;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/llama": config: "[^"]+/llama/config\.json": architecture "LlamaForCausalLM" is not supported \(this engine runs the Qwen2-VL, Qwen2\.5-VL, Qwen3-VL, SmolVLM, Idefics3, InternVL and Gemma 3 families\) in \S+nginx\.conf:\d+$}



=== TEST 2: a directory without weights
--- http_config
    vlm_model $TEST_NGINX_MODELS/noweights;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/noweights": safetensors: "[^"]+/noweights" holds no weights: neither model\.safetensors nor model\.safetensors\.index\.json in \S+nginx\.conf:\d+$}



=== TEST 3: a tensor whose shape the config does not give
--- http_config
    vlm_model $TEST_NGINX_MODELS/shape;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/shape": model: tensor "model\.layers\.0\.mlp\.gate_proj\.weight" has shape \[128, 64\] \(2 dims\), the config needs \[96, 64\] in \S+nginx\.conf:\d+$}



=== TEST 4: a tensor the config needs is missing
--- http_config
    vlm_model $TEST_NGINX_MODELS/layers;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/layers": model: tensor "model\.layers\.2\.[a-z_.]+" is missing in \S+nginx\.conf:\d+$}



=== TEST 5: a dtype the engine does not run
--- http_config
    vlm_model $TEST_NGINX_MODELS/dtype;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/dtype": model: tensor "[^"]+": dtype I32 is not supported.* in \S+nginx\.conf:\d+$}



=== TEST 6: a chat template the interpreter cannot parse
--- http_config
    vlm_model $TEST_NGINX_MODELS/badtemplate;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/badtemplate": the chat_template in "[^"]+/badtemplate/chat_template\.json": chat template line 2: unexpected end of template, expected 'endfor' in \S+nginx\.conf:\d+$}



=== TEST 7: no chat template at all
--- http_config
    vlm_model $TEST_NGINX_MODELS/notemplate;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/notemplate": no chat_template in "[^"]+/notemplate/tokenizer_config\.json" in \S+nginx\.conf:\d+$}



=== TEST 8: the mixture-of-experts Qwen3-VL, refused by name
--- http_config
    vlm_model $TEST_NGINX_MODELS/qwen3moe;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/qwen3moe": config: "[^"]+/qwen3moe/config\.json": architecture "Qwen3VLMoeForConditionalGeneration" \(the mixture-of-experts Qwen3-VL\) is not supported; of Qwen3-VL this engine runs the dense Qwen3VLForConditionalGeneration in \S+nginx\.conf:\d+$}



=== TEST 9: another family's image processor than the model's, refused by name
--- http_config
    vlm_model $TEST_NGINX_MODELS/smolvlmproc;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/smolvlmproc": \S+/smolvlmproc/preprocessor_config\.json: image_processor_type "SmolVLMImageProcessor" is not Qwen2-VL's, which this model's architecture takes \(SmolVLM's and Idefics3's processor is for their own architectures\) in \S+nginx\.conf:\d+$}



=== TEST 10: Gemma 3 with final logit softcapping, refused by name
--- http_config
    vlm_model $TEST_NGINX_MODELS/gemma3-softcap;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/gemma3-softcap": .*text: final_logit_softcapping is not supported in \S+nginx\.conf:\d+$}



=== TEST 11: Gemma 3's pan and scan, refused by name
--- http_config
    vlm_model $TEST_NGINX_MODELS/gemma3-panscan;
--- config
    location = /t { return 204; }
--- must_die
--- suppress_stderr
--- error_log eval
qr{\[emerg\] .*: vlm_model "[^"]+/gemma3-panscan": \S+/gemma3-panscan/preprocessor_config\.json: preprocessor config: "do_pan_and_scan" is not a value this image processor takes in \S+nginx\.conf:\d+$}
