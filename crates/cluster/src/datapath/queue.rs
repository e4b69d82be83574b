//! A bounded first-in first-out queue held inline: a request's outputs
//! without an allocation.

#[derive(Debug)]
pub(crate) struct Queue<T: Copy, const N: usize> {
    items: [Option<T>; N],
    head: usize,
    len: usize,
}

impl<T: Copy, const N: usize> Default for Queue<T, N> {
    fn default() -> Self {
        Queue {
            items: [None; N],
            head: 0,
            len: 0,
        }
    }
}

impl<T: Copy, const N: usize> Queue<T, N> {
    /// Adds `item` at the back. A machine never has more than `N` outputs
    /// waiting (its driver takes them after every input).
    pub fn push(&mut self, item: T) {
        assert!(self.len < N, "output queue full: the driver must drain it");
        self.items[(self.head + self.len) % N] = Some(item);
        self.len += 1;
    }

    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let item = self.items[self.head].take();
        self.head = (self.head + 1) % N;
        self.len -= 1;
        item
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_the_wrap() {
        let mut queue: Queue<u32, 3> = Queue::default();
        queue.push(1);
        queue.push(2);
        assert_eq!(queue.pop(), Some(1));
        queue.push(3);
        queue.push(4);
        assert_eq!(queue.pop(), Some(2));
        assert_eq!(queue.pop(), Some(3));
        assert_eq!(queue.pop(), Some(4));
        assert_eq!(queue.pop(), None);
        assert!(queue.is_empty());
    }

    #[test]
    #[should_panic(expected = "output queue full")]
    fn refuses_more_than_it_holds() {
        let mut queue: Queue<u32, 2> = Queue::default();
        queue.push(1);
        queue.push(2);
        queue.push(3);
    }
}
