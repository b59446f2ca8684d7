//! The 2-D plane the page draws trajectories in: the top two principal
//! directions of the readout matrix's rows, i.e. the plane in which the
//! characters' readout vectors spread most. Data-independent and fixed per
//! checkpoint, so every backend projects identically.

/// Top-2 eigenvectors of `W^T W` for a row-major (rows x cols) `w`, by power
/// iteration with deflation (deterministic start vectors).
pub fn top2_directions(w: &[f32], rows: usize, cols: usize) -> [Vec<f32>; 2] {
    let mut gram = vec![0f64; cols * cols];
    for r in 0..rows {
        let row = &w[r * cols..(r + 1) * cols];
        for i in 0..cols {
            for j in 0..cols {
                gram[i * cols + j] += row[i] as f64 * row[j] as f64;
            }
        }
    }
    let mut found: Vec<Vec<f64>> = Vec::new();
    for k in 0..2 {
        let mut v: Vec<f64> = (0..cols).map(|i| 1.0 + ((i * 7 + k * 13) % 11) as f64 / 11.0).collect();
        for _ in 0..300 {
            let mut nv: Vec<f64> = (0..cols).map(|i| (0..cols).map(|j| gram[i * cols + j] * v[j]).sum()).collect();
            for f in &found {
                let d: f64 = nv.iter().zip(f).map(|(a, b)| a * b).sum();
                nv.iter_mut().zip(f).for_each(|(a, b)| *a -= d * b);
            }
            let n = nv.iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-30);
            v = nv.into_iter().map(|a| a / n).collect();
        }
        found.push(v);
    }
    [found[0].iter().map(|&a| a as f32).collect(), found[1].iter().map(|&a| a as f32).collect()]
}

pub fn project(x: &[f32], dirs: &[Vec<f32>; 2]) -> [f32; 2] {
    let dot = |d: &Vec<f32>| x.iter().zip(d).map(|(a, b)| a * b).sum::<f32>();
    [dot(&dirs[0]), dot(&dirs[1])]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_dominant_plane() {
        // rows spread along e0 (large) and e2 (medium), little along e1
        let w = [5.0, 0.1, 0.0, -5.0, 0.0, 0.2, 0.0, 0.1, 2.0, 0.0, 0.0, -2.0];
        let [a, b] = top2_directions(&w, 4, 3);
        assert!(a[0].abs() > 0.99, "{a:?}");
        assert!(b[2].abs() > 0.99, "{b:?}");
        assert!(a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>().abs() < 1e-4);
    }
}
