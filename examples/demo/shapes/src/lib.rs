//! Areas of simple shapes.

/// The area of a square.
pub fn square(side: u32) -> u32 {
    side * side
}

/// The area of a rectangle.
///
/// ```
/// assert_eq!(shapes::rectangle(2, 3), 6);
/// ```
pub fn rectangle(width: u32, height: u32) -> u32 {
    width * height
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squares() {
        assert_eq!(square(3), 9);
    }

    #[test]
    fn rectangles() {
        assert_eq!(rectangle(2, 5), 10);
    }
}
