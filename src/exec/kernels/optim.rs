//! Optimizer updates: sgd, sgd_momentum (PyTorch style, no dampening), adam and adamw
//! (bias correction by the step count `t`, which the step has already incremented).

use crate::exec::Dense;
use crate::ir::ops::AdamAttrs;

/// p_new = p − lr·g.
pub(super) fn sgd(p: &Dense, g: &Dense, lr: f64) -> Dense {
    let data = p.data.iter().zip(&g.data).map(|(&p, &g)| p - lr * g).collect();
    Dense::new(p.shape.clone(), data)
}

/// buf_new = momentum·buf + g; p_new = p − lr·buf_new. Returns (p_new, buf_new).
pub(super) fn sgd_momentum(p: &Dense, g: &Dense, buf: &Dense, lr: f64, momentum: f64) -> Vec<Dense> {
    let buf_new: Vec<f64> = buf.data.iter().zip(&g.data).map(|(&b, &g)| momentum * b + g).collect();
    let p_new = p.data.iter().zip(&buf_new).map(|(&p, &b)| p - lr * b).collect();
    vec![Dense::new(p.shape.clone(), p_new), Dense::new(p.shape.clone(), buf_new)]
}

/// m_new = β1·m + (1 − β1)·g; v_new = β2·v + (1 − β2)·g²; m̂ = m_new / (1 − β1ᵗ);
/// v̂ = v_new / (1 − β2ᵗ); p_new = p − lr·(m̂ / (√v̂ + eps) + weight_decay·p).
/// Returns (p_new, m_new, v_new). With weight_decay = 0 this is adam exactly.
pub(super) fn adam(p: &Dense, g: &Dense, m: &Dense, v: &Dense, t: &Dense, a: &AdamAttrs) -> Vec<Dense> {
    let step = t.data[0];
    let correction1 = 1.0 - a.beta1.powf(step);
    let correction2 = 1.0 - a.beta2.powf(step);
    let n = p.numel();
    let (mut p_new, mut m_new, mut v_new) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let (pi, gi) = (p.data[i], g.data[i]);
        let mi = a.beta1 * m.data[i] + (1.0 - a.beta1) * gi;
        let vi = a.beta2 * v.data[i] + (1.0 - a.beta2) * gi * gi;
        let m_hat = mi / correction1;
        let v_hat = vi / correction2;
        let update = if a.weight_decay == 0.0 {
            m_hat / (v_hat.sqrt() + a.eps)
        } else {
            m_hat / (v_hat.sqrt() + a.eps) + a.weight_decay * pi
        };
        p_new.push(pi - a.lr * update);
        m_new.push(mi);
        v_new.push(vi);
    }
    vec![Dense::new(p.shape.clone(), p_new), Dense::new(p.shape.clone(), m_new), Dense::new(p.shape.clone(), v_new)]
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use crate::ir::ops::{Attr, OpKind};

    #[test]
    fn sgd_steps() {
        let p = t(&[3], &[1.0, 2.0, 3.0]);
        let g = t(&[3], &[0.5, -1.0, 0.0]);
        let out = run(OpKind::Sgd, &[("lr", Attr::Float(0.1))], &[p, g]).remove(0);
        assert_close(&out, &[0.95, 2.1, 3.0], 1e-15);
    }

    #[test]
    fn sgd_momentum_steps() {
        let p = t(&[2], &[1.0, 1.0]);
        let g = t(&[2], &[1.0, -2.0]);
        let buf = t(&[2], &[0.5, 0.0]);
        let given = [("lr", Attr::Float(0.1)), ("momentum", Attr::Float(0.9))];
        let out = run(OpKind::SgdMomentum, &given, &[p, g, buf]);
        // buf_new = 0.9·buf + g = [1.45, −2]; p_new = p − 0.1·buf_new.
        assert_close(&out[1], &[1.45, -2.0], 1e-15);
        assert_close(&out[0], &[0.855, 1.2], 1e-15);
    }

    #[test]
    fn adam_first_step_moves_by_lr_times_sign() {
        let p = t(&[4], &[1.0, -1.0, 0.5, 2.0]);
        let g = t(&[4], &[0.3, -2.0, 1e-3, -50.0]);
        let zeros = t(&[4], &[0.0; 4]);
        let one = t(&[], &[1.0]);
        let given = [("lr", Attr::Float(0.01))];
        let out = run(OpKind::Adam, &given, &[p.clone(), g.clone(), zeros.clone(), zeros.clone(), one.clone()]);
        for i in 0..4 {
            let moved = out[0].data[i] - p.data[i];
            let want = -0.01 * g.data[i].signum();
            assert!((moved / want - 1.0).abs() < 1e-4, "weight {i} moved {moved}");
        }
        assert_close(&out[1], &g.data.iter().map(|g| 0.1 * g).collect::<Vec<_>>(), 1e-12);
        assert_close(&out[2], &g.data.iter().map(|g| 0.001 * g * g).collect::<Vec<_>>(), 1e-12);
        // adamw also shrinks the weights by lr·weight_decay·p.
        let given = [("lr", Attr::Float(0.01)), ("weight_decay", Attr::Float(0.1))];
        let w = run(OpKind::Adamw, &given, &[p.clone(), g, zeros.clone(), zeros, one]);
        for i in 0..4 {
            let decay = w[0].data[i] - out[0].data[i];
            assert!((decay + 0.01 * 0.1 * p.data[i]).abs() < 1e-15, "weight {i}: decay {decay}");
        }
        assert_eq!(w[1], out[1]);
    }

    #[test]
    fn adam_later_step_by_hand() {
        // t = 2, β1 = 0.5, β2 = 0.75, eps = 0: m_new = 0.5·1 + 0.5·2 = 1.5, v_new = 0.75·4 +
        // 0.25·4 = 4; m̂ = 1.5/0.75 = 2, v̂ = 4/0.4375; p_new = 1 − 0.1·2/√v̂.
        let given = [
            ("lr", Attr::Float(0.1)),
            ("beta1", Attr::Float(0.5)),
            ("beta2", Attr::Float(0.75)),
            ("eps", Attr::Float(1e-300)),
        ];
        let out = run(
            OpKind::Adam,
            &given,
            &[t(&[1], &[1.0]), t(&[1], &[2.0]), t(&[1], &[1.0]), t(&[1], &[4.0]), t(&[], &[2.0])],
        );
        assert_close(&out[1], &[1.5], 0.0);
        assert_close(&out[2], &[4.0], 0.0);
        assert_close(&out[0], &[1.0 - 0.1 * 2.0 / (4.0f64 / 0.4375).sqrt()], 1e-15);
    }
}
