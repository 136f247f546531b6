//! A plain row-major f32 tensor on the host: what taps record and what logits come back as.

#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl HostTensor {
    /// Panics if `data.len()` disagrees with `shape`: a programming error inside lockstep,
    /// never a consequence of input.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> HostTensor {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "HostTensor shape {shape:?} does not match {} elements",
            data.len()
        );
        HostTensor { shape, data }
    }

    pub fn matrix(rows: usize, cols: usize, data: Vec<f32>) -> HostTensor {
        HostTensor::new(vec![rows, cols], data)
    }

    pub fn rows(&self) -> usize {
        if self.shape.len() <= 1 {
            1
        } else {
            self.shape[..self.shape.len() - 1].iter().product()
        }
    }

    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    pub fn row(&self, i: usize) -> &[f32] {
        let c = self.cols();
        &self.data[i * c..(i + 1) * c]
    }
}
