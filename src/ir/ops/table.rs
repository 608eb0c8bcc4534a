//! The op table: every op once, in order. Each line names an `OpKind` variant and its row
//! (in the op's family file); the macro `op_table!` makes the enum and [`OPS`] from the same lines,
//! so `OPS[kind as usize]` is the kind's row, and binds each row to its kind (`of_kind`).
//! Adding an op is one line here and a row in its family.

use super::{OpDef, attention, conv, dropout, elementwise, fused, linalg, nn, optim, r#extern, resample, shape};

/// Declares [`OpKind`] and [`OPS`] from `Variant = family::ROW` lines, in one order.
macro_rules! op_table {
    ($($kind:ident = $family:ident::$row:ident,)*) => {
        /// Every op memplan knows. The order is the table's order.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
        pub enum OpKind {
            $($kind,)*
        }

        /// The table. Row order = `OpKind` order.
        pub static OPS: &[OpDef] = &[$($family::$row.of_kind(OpKind::$kind),)*];
    };
}

op_table! {
    // Elementwise arithmetic with broadcasting.
    Add = elementwise::ADD,
    Sub = elementwise::SUB,
    Mul = elementwise::MUL,
    Div = elementwise::DIV,
    AddScalar = elementwise::ADD_SCALAR,
    MulScalar = elementwise::MUL_SCALAR,
    // Elementwise math.
    PowScalar = elementwise::POW_SCALAR,
    Neg = elementwise::NEG,
    Sin = elementwise::SIN,
    Cos = elementwise::COS,
    Exp = elementwise::EXP,
    Log = elementwise::LOG,
    Sqrt = elementwise::SQRT,
    Rsqrt = elementwise::RSQRT,
    // Activations and their gradients.
    Relu = elementwise::RELU,
    ReluBackward = elementwise::RELU_BACKWARD,
    Gelu = elementwise::GELU,
    GeluBackward = elementwise::GELU_BACKWARD,
    Silu = elementwise::SILU,
    SiluBackward = elementwise::SILU_BACKWARD,
    Sigmoid = elementwise::SIGMOID,
    SigmoidBackward = elementwise::SIGMOID_BACKWARD,
    Tanh = elementwise::TANH,
    TanhBackward = elementwise::TANH_BACKWARD,
    Hardswish = elementwise::HARDSWISH,
    HardswishBackward = elementwise::HARDSWISH_BACKWARD,
    Hardsigmoid = elementwise::HARDSIGMOID,
    HardsigmoidBackward = elementwise::HARDSIGMOID_BACKWARD,
    Softmax = nn::SOFTMAX,
    Cumsum = nn::CUMSUM,
    SoftmaxBackward = nn::SOFTMAX_BACKWARD,
    CausalMask = elementwise::CAUSAL_MASK,
    // Linear algebra.
    Matmul = linalg::MATMUL,
    // Fused attention.
    Attention = attention::ATTENTION,
    AttentionBackward = attention::ATTENTION_BACKWARD,
    MaskedAttention = attention::MASKED_ATTENTION,
    MaskedAttentionBackward = attention::MASKED_ATTENTION_BACKWARD,
    AttentionBiasBackward = attention::ATTENTION_BIAS_BACKWARD,
    DropoutAttention = attention::DROPOUT_ATTENTION,
    DropoutAttentionBackward = attention::DROPOUT_ATTENTION_BACKWARD,
    DropoutAttentionBiasBackward = attention::DROPOUT_ATTENTION_BIAS_BACKWARD,
    // Reductions and broadcasts.
    Sum = shape::SUM,
    Mean = shape::MEAN,
    // Views and copies.
    Reshape = shape::RESHAPE,
    Detach = shape::DETACH,
    Transpose = shape::TRANSPOSE,
    Expand = shape::EXPAND,
    Contiguous = elementwise::CONTIGUOUS,
    Cast = elementwise::CAST,
    Fill = elementwise::FILL,
    // Embeddings and normalisation.
    Embedding = nn::EMBEDDING,
    EmbeddingBackward = nn::EMBEDDING_BACKWARD,
    EmbeddingBag = nn::EMBEDDING_BAG,
    EmbeddingBagBackward = nn::EMBEDDING_BAG_BACKWARD,
    Gather = nn::GATHER,
    GatherBackward = nn::GATHER_BACKWARD,
    LayerNorm = nn::LAYER_NORM,
    LayerNormBackward = nn::LAYER_NORM_BACKWARD,
    RmsNorm = nn::RMS_NORM,
    RmsNormBackward = nn::RMS_NORM_BACKWARD,
    BatchNorm = nn::BATCH_NORM,
    BatchNormBackward = nn::BATCH_NORM_BACKWARD,
    BatchNormStats = nn::BATCH_NORM_STATS,
    // Convolution and pooling.
    Conv2d = conv::CONV2D,
    Conv2dBackward = conv::CONV2D_BACKWARD,
    Conv3d = conv::CONV3D,
    Conv3dBackward = conv::CONV3D_BACKWARD,
    MaxPool2d = nn::MAX_POOL2D,
    MaxPool2dBackward = nn::MAX_POOL2D_BACKWARD,
    // Losses.
    CrossEntropy = nn::CROSS_ENTROPY,
    CrossEntropyBackward = nn::CROSS_ENTROPY_BACKWARD,
    LinearCrossEntropy = nn::LINEAR_CROSS_ENTROPY,
    // Optimizer updates.
    Sgd = optim::SGD,
    SgdMomentum = optim::SGD_MOMENTUM,
    Adam = optim::ADAM,
    Adamw = optim::ADAMW,
    // Slicing and concatenation.
    Slice = shape::SLICE,
    Select = shape::SELECT,
    SliceBackward = shape::SLICE_BACKWARD,
    SliceScatter = shape::SLICE_SCATTER,
    Cat = shape::CAT,
    // Ops of another framework memplan plans but cannot run.
    Extern = r#extern::EXTERN,
    ExternView = r#extern::EXTERN_VIEW,
    ExternBackward = r#extern::EXTERN_BACKWARD,
    // Dropout: a mask drawn from (seed, stream, element index), regenerated, never saved.
    Dropout = dropout::DROPOUT,
    DropoutBackward = dropout::DROPOUT_BACKWARD,
    Random = dropout::RANDOM,
    // Transposed convolution.
    ConvTranspose2d = conv::CONV_TRANSPOSE2D,
    ConvTranspose2dBackward = conv::CONV_TRANSPOSE2D_BACKWARD,
    // Resampling of images, a binary loss, and selection by a mask.
    AdaptiveAvgPool2d = resample::ADAPTIVE_AVG_POOL2D,
    AdaptiveAvgPool2dBackward = resample::ADAPTIVE_AVG_POOL2D_BACKWARD,
    UpsampleNearest2d = resample::UPSAMPLE_NEAREST2D,
    UpsampleNearest2dBackward = resample::UPSAMPLE_NEAREST2D_BACKWARD,
    BceWithLogits = nn::BCE_WITH_LOGITS,
    BceWithLogitsBackward = nn::BCE_WITH_LOGITS_BACKWARD,
    Where = elementwise::WHERE,
    MaskedFill = elementwise::MASKED_FILL,
    Compare = elementwise::COMPARE,
    CompareScalar = elementwise::COMPARE_SCALAR,
    // The position of a maximum (integer output, no gradient).
    Argmax = shape::ARGMAX,
    // Bilinear resampling (DeepLabV3's and segmentation heads' upsampling).
    UpsampleBilinear2d = resample::UPSAMPLE_BILINEAR2D,
    UpsampleBilinear2dBackward = resample::UPSAMPLE_BILINEAR2D_BACKWARD,
    GridSample = resample::GRID_SAMPLE,
    GridSampleBackward = resample::GRID_SAMPLE_BACKWARD,
    // The k largest elements and their positions (mixture-of-experts routers).
    Topk = nn::TOPK,
    // The error function (ESM's and BERT-era GELUs written out).
    Erf = elementwise::ERF,
    // Additions at indexed positions (scatter_add, index_add, index_put accumulating).
    ScatterAdd = nn::SCATTER_ADD,
    // Elementwise ops run as one, their inner values never stored (the fusion pass).
    Fused = fused::FUSED,
    // A fused body and its layer or RMS norm in one pass (the fusion pass).
    FusedNorm = fused::FUSED_NORM,
}
